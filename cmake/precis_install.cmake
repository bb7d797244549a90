# Installation: the library, its public headers under include/precis/, and an exported
# precis::precis target for find_package(precis CONFIG).
#
#   <prefix>/include/precis/precis.h              (umbrella, once the repository root has one)
#   <prefix>/include/precis/<folder>/...h         core tensor autograd ops amp optim data models
#   <prefix>/lib/libprecis.so.<major>, libprecis.a  precis::precis (shared), precis::precis_static
#   <prefix>/lib/libprecis_cuda.so.<major>           the CUDA backend, opened at run time (CUDA builds)
#   <prefix>/lib/cmake/precis/precis{Config,ConfigVersion,Targets}.cmake
#
# The exported target's include directories are both include/ (for <precis/precis.h>) and
# include/precis/ (for the repository-rooted "tensor/tensor.h" that the headers use themselves).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PRECIS_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/precis"
    CACHE STRING "Where precisConfig.cmake is installed, relative to the prefix")
mark_as_advanced(PRECIS_INSTALL_CMAKEDIR)

# Keep the run path to libraries outside the prefix (oneDNN or CUDA outside the system folders) so
# that the installed libraries find them; CMake strips the build-tree run path on install otherwise.
set_target_properties(precis PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS precis precis_static EXPORT precisTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${CMAKE_INSTALL_INCLUDEDIR}/precis)
# The CUDA backend is nobody's link dependency (libprecis.so opens it), so it is not exported.
# $ORIGIN: it finds libprecis.so beside itself; the CUDA libraries by the link path or the loader.
if(TARGET precis_cuda)
  set_target_properties(precis_cuda PROPERTIES INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS precis_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
if(TARGET precis-train)
  set_target_properties(precis-train PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
  install(TARGETS precis-train RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# Headers: selected at install time (see the script for what counts as public).
install(CODE "
  set(PRECIS_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(PRECIS_HEADER_FOLDERS \"${PRECIS_FOLDERS}\")
  set(PRECIS_INCLUDE_DEST \"${CMAKE_INSTALL_INCLUDEDIR}/precis\")")
install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/precis_install_headers.cmake)

install(EXPORT precisTargets NAMESPACE precis:: DESTINATION ${PRECIS_INSTALL_CMAKEDIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/precisConfig.cmake.in
  ${PROJECT_BINARY_DIR}/precisConfig.cmake
  INSTALL_DESTINATION ${PRECIS_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/precisConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/precisConfig.cmake ${PROJECT_BINARY_DIR}/precisConfigVersion.cmake
  DESTINATION ${PRECIS_INSTALL_CMAKEDIR})
