# The library precis::precis, built from one object library per layer (docs/design/architecture.md):
#
#   core <- tensor <- ops (autograd + ops, the one mutual pair) <- data, optim, summary <- amp <- dist <- models
#
# Each layer compiles once, as precis_<layer>; precis::precis is all of their objects (installed and
# exported as before: one libprecis). For each layer a check library links that layer's objects
# with those of the layers it may use and nothing else, with --no-undefined: a call from a layer
# into one above it (a back-edge) fails the build, naming the symbol. tests/architecture checks the
# same rule on #include lines. Sources are collected per folder so that adding a file needs no
# CMake edit; CUDA sources live only in */cuda/ folders and are compiled only with CUDA on, MPI
# sources only in */mpi/ folders, compiled only when MPI was found.
set(PRECIS_FOLDERS core tensor autograd ops amp optim data summary dist models)
set(PRECIS_LAYERS core tensor ops data optim summary amp dist models)
set(PRECIS_LAYER_core_FOLDERS core)
set(PRECIS_LAYER_tensor_FOLDERS tensor)
set(PRECIS_LAYER_ops_FOLDERS autograd ops)
set(PRECIS_LAYER_data_FOLDERS data)
set(PRECIS_LAYER_optim_FOLDERS optim)
set(PRECIS_LAYER_summary_FOLDERS summary)
set(PRECIS_LAYER_amp_FOLDERS amp)
set(PRECIS_LAYER_dist_FOLDERS dist)
set(PRECIS_LAYER_models_FOLDERS models)
# What each layer may link against, lowest first. data calls Tensor methods and factory functions
# that tensor/ declares and ops/ defines (they run kernels), so it links above ops although its
# #includes stay within core and tensor.
set(PRECIS_LAYER_core_USES "")
set(PRECIS_LAYER_tensor_USES core)
set(PRECIS_LAYER_ops_USES core tensor)
set(PRECIS_LAYER_data_USES core tensor ops)
set(PRECIS_LAYER_optim_USES core tensor ops)
# summary (TensorBoard event files) reads tensors to the host for histograms (ops runs the casts).
set(PRECIS_LAYER_summary_USES core tensor ops)
set(PRECIS_LAYER_amp_USES core tensor ops optim)
set(PRECIS_LAYER_dist_USES core tensor ops optim amp)
set(PRECIS_LAYER_models_USES core tensor ops data optim summary amp dist)

# zlib: data/ reads gzip-compressed dataset files (MNIST's *.gz) in memory.
find_package(ZLIB REQUIRED)

option(PRECIS_LAYER_CHECKS "Link one check library per layer to catch calls into higher layers" ${PROJECT_IS_TOP_LEVEL})

# Compile settings every layer shares (the usage requirements the old single target had).
function(precis_layer_settings target)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_link_libraries(${target} PRIVATE Threads::Threads $<BUILD_INTERFACE:Eigen3::Eigen> ZLIB::ZLIB OpenMP::OpenMP_CXX)
  # Eigen would parallelise its products on OpenMP by itself; precis splits that work with
  # parallel_for where it wants threads.
  target_compile_definitions(${target} PRIVATE EIGEN_DONT_PARALLELIZE)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  # Vectorised kernels: x86-64 with AVX-512 detection at run time where it matters (bulk dtype
  # conversion); the base ISA stays portable.
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-mf16c -mavx2 -mfma>)
  endif()
  if(PRECIS_ONEDNN)
    target_link_libraries(${target} PRIVATE DNNL::dnnl)
    target_compile_definitions(${target} PUBLIC PRECIS_HAS_ONEDNN=1)
  endif()
  if(PRECIS_WITH_MPI)
    target_link_libraries(${target} PRIVATE MPI::MPI_CXX)
    target_compile_definitions(${target} PUBLIC PRECIS_HAS_MPI=1)
  endif()
  # PRECIS_HAS_CUDA/NCCL/CUDNN say what the CUDA backend library (below) holds; the CPU layers
  # never test them: they reach the backend only through core/cuda_backend.h.
  if(PRECIS_WITH_CUDA)
    target_compile_definitions(${target} PUBLIC PRECIS_HAS_CUDA=1)
  endif()
  if(PRECIS_WITH_NCCL)
    target_compile_definitions(${target} PUBLIC PRECIS_HAS_NCCL=1)
  endif()
  if(PRECIS_WITH_CUDNN)
    target_compile_definitions(${target} PUBLIC PRECIS_HAS_CUDNN=1)
  endif()
  if(PRECIS_SANITIZE)
    target_compile_options(${target} PUBLIC $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer>)
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
endfunction()

# ops/cpu/optim.cpp and unary.cpp: sqrt without errno (nothing reads it) is the bare instruction, so
# Adam's element loop and sqrt/rsqrt vectorise; the results are the same correctly rounded roots.
set_source_files_properties(${PROJECT_SOURCE_DIR}/ops/cpu/optim.cpp ${PROJECT_SOURCE_DIR}/ops/cpu/unary.cpp
                            PROPERTIES COMPILE_OPTIONS -fno-math-errno)

set(_precis_all_objects "")
set(_precis_cuda_sources "")
foreach(layer ${PRECIS_LAYERS})
  set(_cpu_sources "")
  set(_cuda_sources "")
  set(_mpi_sources "")
  foreach(folder ${PRECIS_LAYER_${layer}_FOLDERS})
    file(GLOB_RECURSE _cpp CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.cpp)
    file(GLOB_RECURSE _cu CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.cu)
    foreach(f ${_cpp})
      if(f MATCHES "/cuda/")
        list(APPEND _cuda_sources ${f})
      elseif(f MATCHES "/mpi/")
        list(APPEND _mpi_sources ${f})
      elseif(f MATCHES "/summary/.*_off\\.cpp$" AND PRECIS_WITH_TENSORBOARD)
        # summary/*_off.cpp stands in for the event code when TensorBoard support is off.
      elseif(f MATCHES "/summary/" AND NOT f MATCHES "_off\\.cpp$" AND NOT PRECIS_WITH_TENSORBOARD)
      elseif(NOT f MATCHES "/models/tools/")
        list(APPEND _cpu_sources ${f})
      endif()
    endforeach()
    list(APPEND _cuda_sources ${_cu})
  endforeach()
  list(APPEND _precis_cuda_sources ${_cuda_sources})
  if(PRECIS_WITH_MPI)
    list(APPEND _cpu_sources ${_mpi_sources})
  endif()
  if(layer STREQUAL "summary")
    list(APPEND _cpu_sources ${PRECIS_TENSORBOARD_PB_SOURCES})
  endif()
  add_library(precis_${layer} OBJECT ${_cpu_sources})
  precis_layer_settings(precis_${layer})
  if(layer STREQUAL "summary")
    precis_tensorboard_usage(precis_summary PRIVATE)
  endif()
  list(APPEND _precis_all_objects $<TARGET_OBJECTS:precis_${layer}>)
endforeach()

# Two libraries from the same objects: precis::precis is the shared libprecis.so (soname
# libprecis.so.<major>), what the build's own programs and an install's users link; the static
# libprecis.a (precis::precis_static) is for CPU-only programs that want one self-contained binary.
# The CUDA backend library links the shared one, so only it can load CUDA (core/cuda_backend.h).
add_library(precis SHARED ${_precis_all_objects})
add_library(precis_static STATIC ${_precis_all_objects})
add_library(precis::precis ALIAS precis)
add_library(precis::precis_static ALIAS precis_static)
set_target_properties(precis PROPERTIES OUTPUT_NAME precis EXPORT_NAME precis LINKER_LANGUAGE CXX
                      VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
set_target_properties(precis_static PROPERTIES OUTPUT_NAME precis EXPORT_NAME precis_static LINKER_LANGUAGE CXX)
# A symbol the library defines is the one it calls (no interposition through the PLT), so calls
# inside libprecis.so cost what they cost in the static library.
target_link_options(precis PRIVATE -Wl,-Bsymbolic-functions)
foreach(_lib precis precis_static)
  # Installed include directories (include/ and include/precis/) are set by precis_install.cmake.
  target_include_directories(${_lib} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  target_compile_features(${_lib} PUBLIC cxx_std_20)
  # Eigen is header-only and private: BUILD_INTERFACE keeps it out of the exported link interface,
  # so a static libprecis.a does not make its consumers find Eigen.
  target_link_libraries(${_lib} PUBLIC Threads::Threads PRIVATE $<BUILD_INTERFACE:Eigen3::Eigen>)
  target_link_libraries(${_lib} PRIVATE ZLIB::ZLIB ${CMAKE_DL_LIBS})
  if(PRECIS_WITH_TENSORBOARD)
    target_link_libraries(${_lib} PRIVATE protobuf::libprotobuf ${PRECIS_ISAL_LIBRARY})
  endif()
  # OpenMP: the intra-op pool is an OpenMP team (core/thread_pool.cpp), shared with oneDNN. Private:
  # only the library is compiled with -fopenmp; a consumer of the static library links libgomp.
  target_link_libraries(${_lib} PRIVATE OpenMP::OpenMP_CXX)
  if(PRECIS_ONEDNN)
    target_link_libraries(${_lib} PRIVATE DNNL::dnnl)
    target_compile_definitions(${_lib} PUBLIC PRECIS_HAS_ONEDNN=1)
  endif()
  if(PRECIS_WITH_MPI)
    target_link_libraries(${_lib} PRIVATE MPI::MPI_CXX)
    target_compile_definitions(${_lib} PUBLIC PRECIS_HAS_MPI=1)
  endif()
  # What the CUDA backend holds (tests compile their [cuda] cases by it); nothing CUDA is linked.
  if(PRECIS_WITH_CUDA)
    target_compile_definitions(${_lib} PUBLIC PRECIS_HAS_CUDA=1)
  endif()
  if(PRECIS_WITH_NCCL)
    target_compile_definitions(${_lib} PUBLIC PRECIS_HAS_NCCL=1)
  endif()
  if(PRECIS_WITH_CUDNN)
    target_compile_definitions(${_lib} PUBLIC PRECIS_HAS_CUDNN=1)
  endif()
  if(PRECIS_SANITIZE)
    target_compile_options(${_lib} PUBLIC $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer>)
    target_link_options(${_lib} PUBLIC -fsanitize=address,undefined)
  endif()
endforeach()

# The CUDA backend: every */cuda/ source, in libprecis_cuda.so.<major>, which libprecis.so opens on
# the first request for a CUDA device (core/cuda_backend.cpp) and which alone links the CUDA
# libraries. --no-undefined: whatever it calls in precis is in libprecis.so.
if(PRECIS_WITH_CUDA)
  add_library(precis_cuda SHARED ${_precis_cuda_sources})
  precis_layer_settings(precis_cuda)
  set_target_properties(precis_cuda PROPERTIES OUTPUT_NAME precis_cuda VERSION ${PROJECT_VERSION}
                        SOVERSION ${PROJECT_VERSION_MAJOR} CUDA_SEPARABLE_COMPILATION OFF)
  target_compile_options(precis_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-fPIC>)
  # (Not under the sanitizers, whose runtime the executable brings; they turn the layer checks off.)
  if(PRECIS_LAYER_CHECKS)
    target_link_options(precis_cuda PRIVATE -Wl,--no-undefined)
  endif()
  target_link_libraries(precis_cuda PUBLIC precis PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt)
  set(_precis_cuda_needs "the CUDA ${CUDAToolkit_VERSION_MAJOR} runtime" cuBLAS cuBLASLt)
  if(PRECIS_WITH_CUDNN)
    target_link_libraries(precis_cuda PRIVATE precis_cudnn_imported)
    list(APPEND _precis_cuda_needs "cuDNN ${_cudnn_MAJOR}")
  endif()
  if(PRECIS_WITH_NCCL)
    target_link_libraries(precis_cuda PRIVATE precis_nccl_imported)
    list(APPEND _precis_cuda_needs NCCL)
  endif()
  list(POP_BACK _precis_cuda_needs _precis_cuda_last)
  list(JOIN _precis_cuda_needs ", " _precis_cuda_needs)
  set(_precis_cuda_needs "${_precis_cuda_needs} and ${_precis_cuda_last} libraries")
  # The loader's file name, and what the message of a failed load lists.
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/core/cuda_backend.cpp APPEND PROPERTY COMPILE_DEFINITIONS
               "PRECIS_CUDA_BACKEND_FILE=\"libprecis_cuda.so.${PROJECT_VERSION_MAJOR}\""
               "PRECIS_CUDA_BACKEND_NEEDS=\"${_precis_cuda_needs}\"")
endif()

# The layer checks: shared libraries that must link with no undefined symbol; libprecis.so too.
if(PRECIS_LAYER_CHECKS)
  target_link_options(precis PRIVATE -Wl,--no-undefined)
  foreach(layer ${PRECIS_LAYERS})
    set(_objects "")
    foreach(used ${PRECIS_LAYER_${layer}_USES} ${layer})
      list(APPEND _objects $<TARGET_OBJECTS:precis_${used}>)
    endforeach()
    add_library(precis_layercheck_${layer} SHARED ${_objects})
    set_target_properties(precis_layercheck_${layer} PROPERTIES LINKER_LANGUAGE CXX
                          LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/layercheck)
    target_link_options(precis_layercheck_${layer} PRIVATE -Wl,--no-undefined)
    target_link_libraries(precis_layercheck_${layer} PRIVATE Threads::Threads ZLIB::ZLIB OpenMP::OpenMP_CXX)
    if(PRECIS_WITH_TENSORBOARD)
      target_link_libraries(precis_layercheck_${layer} PRIVATE protobuf::libprotobuf ${PRECIS_ISAL_LIBRARY})
    endif()
    if(PRECIS_ONEDNN)
      target_link_libraries(precis_layercheck_${layer} PRIVATE DNNL::dnnl)
    endif()
    if(PRECIS_WITH_MPI)
      target_link_libraries(precis_layercheck_${layer} PRIVATE MPI::MPI_CXX)
    endif()
    target_link_libraries(precis_layercheck_${layer} PRIVATE ${CMAKE_DL_LIBS})
    if(PRECIS_SANITIZE)
      target_link_options(precis_layercheck_${layer} PRIVATE -fsanitize=address,undefined)
    endif()
  endforeach()
endif()

# Users write #include <precis/precis.h>. Installed, that is include/precis/precis.h; in a build
# tree (tests, add_subdirectory consumers) a generated forwarding header gives the same spelling.
# The glob makes adding the root precis.h re-run CMake.
file(GLOB _precis_umbrella CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/precis.h)
set(_precis_fwd ${PROJECT_BINARY_DIR}/precis-include/precis/precis.h)
if(_precis_umbrella)
  file(CONFIGURE OUTPUT ${_precis_fwd} CONTENT
       "// Generated by precis_library.cmake: forwards to the umbrella header of the source tree.\n#include \"${_precis_umbrella}\"\n")
  target_include_directories(precis PUBLIC $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/precis-include>)
else()
  file(REMOVE ${_precis_fwd})
endif()
