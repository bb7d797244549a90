// The one Catch2 main, compiled once and linked into every test executable (MACHINE.md: compiling
// it per test file costs ~16 s each).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
