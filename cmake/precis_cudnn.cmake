# cuDNN for the CUDA backend's convolutions (ops/cuda/conv_cudnn.cpp). Included after the CUDA
# detection; sets PRECIS_WITH_CUDNN, PRECIS_CUDNN_INCLUDE_DIR, PRECIS_CUDNN_LIBRARY and the
# imported target precis_cudnn_imported (linked privately: no public header includes cudnn.h).
#
#   PRECIS_CUDNN         AUTO (when found; the default), ON (fail when not found) or OFF
#   PRECIS_CUDNN_ROOT    a cuDNN tree with include/cudnn.h and lib/ or lib64/ (a tarball, a
#                        conda env, or site-packages/nvidia/cudnn of the nvidia-cudnn-cu13 wheel);
#                        searched first. The environment variable CUDNN_ROOT is read when unset.
#   PRECIS_CUDNN_PYTHON  a Python interpreter whose site-packages hold nvidia/cudnn (the wheel
#                        PyTorch depends on, e.g. PRECIS_CUDNN_PYTHON=python3 on a machine with
#                        PyTorch); searched after PRECIS_CUDNN_ROOT, before the CUDA toolkit.
#
# The wheel ships libcudnn.so.9 without the unversioned libcudnn.so link, so both names are
# searched. Binaries find libcudnn.so.9 through their run path (CMake's build run path; installed,
# precis_install.cmake keeps link paths); libcudnn.so.9 then dlopens its sub-libraries
# (libcudnn_graph, _cnn, _engines_*) by soname through its own RUNPATH $ORIGIN, i.e. from its own
# folder. An LD_LIBRARY_PATH naming another cuDNN comes first in that search and can mix versions
# (CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH): keep other cuDNN folders off it.
set(PRECIS_CUDNN AUTO CACHE STRING "Use cuDNN for the CUDA convolutions: AUTO (when found), ON or OFF")
set_property(CACHE PRECIS_CUDNN PROPERTY STRINGS AUTO ON OFF)
set(PRECIS_CUDNN_ROOT "" CACHE PATH "A cuDNN tree (include/, lib/ or lib64/) searched before the CUDA toolkit")
set(PRECIS_CUDNN_PYTHON "" CACHE STRING "A Python whose site-packages/nvidia/cudnn (PyTorch's cuDNN wheel) is searched")

set(PRECIS_WITH_CUDNN OFF)
if(PRECIS_WITH_CUDA AND (PRECIS_CUDNN STREQUAL "AUTO" OR PRECIS_CUDNN))
  set(_cudnn_hints "")
  if(PRECIS_CUDNN_ROOT)
    list(APPEND _cudnn_hints "${PRECIS_CUDNN_ROOT}")
  elseif(DEFINED ENV{CUDNN_ROOT})
    list(APPEND _cudnn_hints "$ENV{CUDNN_ROOT}")
  endif()
  if(PRECIS_CUDNN_PYTHON)
    # purelib and platlib: a wheel's nvidia/ package may land in either (usually the same folder).
    execute_process(
      COMMAND "${PRECIS_CUDNN_PYTHON}" -c
              "import sysconfig; print(sysconfig.get_paths()['purelib']); print(sysconfig.get_paths()['platlib'])"
      OUTPUT_VARIABLE _cudnn_site RESULT_VARIABLE _cudnn_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT _cudnn_rc EQUAL 0)
      message(FATAL_ERROR "PRECIS_CUDNN_PYTHON=${PRECIS_CUDNN_PYTHON} did not run; give a Python interpreter "
                          "(e.g. python3) whose site-packages hold nvidia/cudnn, or set PRECIS_CUDNN_ROOT")
    endif()
    string(REPLACE "\n" ";" _cudnn_site "${_cudnn_site}")
    foreach(_dir IN LISTS _cudnn_site)
      list(APPEND _cudnn_hints "${_dir}/nvidia/cudnn")
    endforeach()
  endif()
  # The hints alone first, so that a given root wins over the toolkit's copy.
  if(_cudnn_hints)
    find_path(PRECIS_CUDNN_INCLUDE_DIR cudnn.h PATHS ${_cudnn_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
  endif()
  find_path(PRECIS_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(PRECIS_CUDNN_INCLUDE_DIR)
    # The library next to the header that was found (a root's lib/, the toolkit's lib64/).
    get_filename_component(_cudnn_prefix "${PRECIS_CUDNN_INCLUDE_DIR}" DIRECTORY)
    find_library(PRECIS_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
                 PATHS ${_cudnn_prefix} ${_cudnn_hints} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
    find_library(PRECIS_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${CUDAToolkit_LIBRARY_DIR})
  endif()
  set(_cudnn_version "")
  if(PRECIS_CUDNN_INCLUDE_DIR AND EXISTS "${PRECIS_CUDNN_INCLUDE_DIR}/cudnn_version.h")
    file(STRINGS "${PRECIS_CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_defs REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
    foreach(_part MAJOR MINOR PATCHLEVEL)
      string(REGEX MATCH "CUDNN_${_part} ([0-9]+)" _m "${_cudnn_defs}")
      set(_cudnn_${_part} "${CMAKE_MATCH_1}")
    endforeach()
    set(_cudnn_version "${_cudnn_MAJOR}.${_cudnn_MINOR}.${_cudnn_PATCHLEVEL}")
  endif()
  if(PRECIS_CUDNN_INCLUDE_DIR AND PRECIS_CUDNN_LIBRARY AND _cudnn_version VERSION_GREATER_EQUAL 9.0)
    set(PRECIS_WITH_CUDNN ON)
    add_library(precis_cudnn_imported UNKNOWN IMPORTED)
    set_target_properties(precis_cudnn_imported PROPERTIES IMPORTED_LOCATION "${PRECIS_CUDNN_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${PRECIS_CUDNN_INCLUDE_DIR}")
    message(STATUS "precis: cuDNN ${_cudnn_version}: ${PRECIS_CUDNN_LIBRARY}")
  elseif(PRECIS_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "PRECIS_CUDNN=ON but cuDNN >= 9 was not found (header: '${PRECIS_CUDNN_INCLUDE_DIR}', "
                        "version '${_cudnn_version}', library: '${PRECIS_CUDNN_LIBRARY}'). Set PRECIS_CUDNN_ROOT to "
                        "a cuDNN tree, or PRECIS_CUDNN_PYTHON to a Python with the nvidia-cudnn wheel; "
                        "PRECIS_CUDNN=OFF builds the CUDA backend without convolutions.")
  else()
    message(STATUS "precis: cuDNN >= 9 not found (set PRECIS_CUDNN_ROOT or PRECIS_CUDNN_PYTHON); "
                   "the CUDA backend has no convolutions")
  endif()
elseif(PRECIS_CUDNN STREQUAL "ON")
  message(FATAL_ERROR "PRECIS_CUDNN=ON needs the CUDA backend (PRECIS_CUDA)")
endif()
message(STATUS "precis: cuDNN ${PRECIS_WITH_CUDNN}")
