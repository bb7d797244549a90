# Runs at install time (install(SCRIPT) from precis_install.cmake). Copies the public headers of
# the library folders into <prefix>/<PRECIS_INCLUDE_DEST>/<folder>/..., keeping the layout, plus
# the umbrella precis.h from the repository root when there is one.
#
# Public means: not under a cpu/, cuda/ or mpi/ folder (backend code), and not including Eigen, oneDNN,
# CUDA, NCCL or MPI headers (DESIGN.md §2: public headers include none of them). The selection is
# made here rather than at configure time so that editing a header's includes needs no re-configure.
#
# Inputs (set by install(CODE) just before): PRECIS_SOURCE_DIR, PRECIS_HEADER_FOLDERS,
# PRECIS_INCLUDE_DEST (relative to the prefix, or absolute).

if(IS_ABSOLUTE "${PRECIS_INCLUDE_DEST}")
  set(_dest "${PRECIS_INCLUDE_DEST}")
else()
  set(_dest "${CMAKE_INSTALL_PREFIX}/${PRECIS_INCLUDE_DEST}")
endif()

set(_private_include_regex
    "^[ \t]*#[ \t]*include[ \t]*[<\"](Eigen/|unsupported/Eigen/|dnnl|oneapi/dnnl/|cuda|cublas|cudnn|curand|nccl|mpi\\.h|thrust/|cub/|google/protobuf/|isa-l)")

set(_count 0)
foreach(_folder IN LISTS PRECIS_HEADER_FOLDERS)
  file(GLOB_RECURSE _headers RELATIVE "${PRECIS_SOURCE_DIR}"
       "${PRECIS_SOURCE_DIR}/${_folder}/*.h" "${PRECIS_SOURCE_DIR}/${_folder}/*.hpp"
       "${PRECIS_SOURCE_DIR}/${_folder}/*.inl" "${PRECIS_SOURCE_DIR}/${_folder}/*.def")
  list(SORT _headers)
  foreach(_h IN LISTS _headers)
    if(_h MATCHES "(^|/)(cpu|cuda|mpi)/")
      continue()
    endif()
    file(STRINGS "${PRECIS_SOURCE_DIR}/${_h}" _private REGEX "${_private_include_regex}")
    if(_private)
      list(GET _private 0 _first)
      string(STRIP "${_first}" _first)
      message(STATUS "Not installing ${_h}: it is not a public header (${_first})")
      continue()
    endif()
    get_filename_component(_dir "${_h}" DIRECTORY)
    file(INSTALL DESTINATION "${_dest}/${_dir}" TYPE FILE FILES "${PRECIS_SOURCE_DIR}/${_h}")
    math(EXPR _count "${_count} + 1")
  endforeach()
endforeach()

if(EXISTS "${PRECIS_SOURCE_DIR}/precis.h")
  file(INSTALL DESTINATION "${_dest}" TYPE FILE FILES "${PRECIS_SOURCE_DIR}/precis.h")
  math(EXPR _count "${_count} + 1")
endif()
message(STATUS "precis: ${_count} public headers under ${_dest}")
