# The one library target, precis::precis. Sources are collected per folder so that adding a file
# needs no CMake edit; CUDA sources live only in */cuda/ folders and are compiled only with CUDA on.
set(PRECIS_FOLDERS core tensor autograd ops amp optim data models)
set(_cpu_sources "")
set(_cuda_sources "")
foreach(folder ${PRECIS_FOLDERS})
  file(GLOB_RECURSE _cpp CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.cpp)
  file(GLOB_RECURSE _cu CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*.cu)
  foreach(f ${_cpp})
    if(f MATCHES "/cuda/")
      list(APPEND _cuda_sources ${f})
    elseif(NOT f MATCHES "/models/tools/")
      list(APPEND _cpu_sources ${f})
    endif()
  endforeach()
  list(APPEND _cuda_sources ${_cu})
endforeach()

# CMake < 3.26 does not know nvcc's C++20 flag and refuses the C++20 dialect for .cu files
# ("requires the language dialect CUDA20"), although nvcc >= 12 with g++ >= 10 compiles C++20
# fine. Tell it the flag (CMake >= 3.26 sets these itself for NVIDIA).
if(PRECIS_WITH_CUDA AND CMAKE_VERSION VERSION_LESS 3.26 AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
   AND NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()

add_library(precis ${_cpu_sources})
add_library(precis::precis ALIAS precis)
set_target_properties(precis PROPERTIES OUTPUT_NAME precis EXPORT_NAME precis)
target_include_directories(precis PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:include/precis>)
target_compile_features(precis PUBLIC cxx_std_20)
target_link_libraries(precis PUBLIC Threads::Threads PRIVATE Eigen3::Eigen)
target_compile_options(precis PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)

# Vectorised kernels: the library is built for x86-64 with AVX-512 detection at run time where it
# matters (bulk dtype conversion); the base ISA stays portable.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  target_compile_options(precis PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-mf16c -mavx2 -mfma>)
endif()

if(PRECIS_ONEDNN)
  target_link_libraries(precis PRIVATE DNNL::dnnl)
  target_compile_definitions(precis PUBLIC PRECIS_HAS_ONEDNN=1)
endif()

if(PRECIS_WITH_CUDA)
  target_sources(precis PRIVATE ${_cuda_sources})
  target_link_libraries(precis PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt)
  target_compile_definitions(precis PUBLIC PRECIS_HAS_CUDA=1)
  set_target_properties(precis PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  target_compile_options(precis PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-fPIC>)
endif()

if(PRECIS_SANITIZE)
  target_compile_options(precis PUBLIC $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer>)
  target_link_options(precis PUBLIC -fsanitize=address,undefined)
endif()
