# Installation: headers under include/precis/, the library, and an exported precis::precis target
# for find_package(precis CONFIG).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
