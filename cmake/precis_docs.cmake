# `make docs` / `cmake --build <build> --target docs`: the API reference of the public headers with
# Doxygen (Debian's doxygen, installed by scripts/install-deps.sh) into <build>/docs/html; every
# Doxygen warning is an error (docs/api/run_doxygen.py has the one exception, a shrinking list).
find_package(Doxygen QUIET)
find_package(Python3 QUIET COMPONENTS Interpreter)
if(DOXYGEN_EXECUTABLE AND Python3_EXECUTABLE)
  add_custom_target(docs
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/docs/api/run_doxygen.py ${DOXYGEN_EXECUTABLE}
            ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/docs
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    COMMENT "Doxygen: the API reference in ${PROJECT_BINARY_DIR}/docs/html"
    VERBATIM USES_TERMINAL)
else()
  add_custom_target(docs
    COMMAND ${CMAKE_COMMAND} -E echo "docs: doxygen (and python3) not found: run scripts/install-deps.sh and reconfigure"
    COMMAND ${CMAKE_COMMAND} -E false
    VERBATIM)
endif()
