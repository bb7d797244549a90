#pragma once
// Shared helpers of the libFuzzer harnesses. A harness passes an input when the call under test
// returns or throws a precis::Error subclass; any other exception escapes to libFuzzer (which
// reports it as a crash, "deadly signal" after std::terminate), and so does a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace precis::fuzz {

/// Writes the input to a per-process temporary file (overwritten each call) and returns its path,
/// for readers that only take a path. `suffix` lets a reader see the name it expects (".gz").
const std::string& write_temp(const uint8_t* data, size_t size, const std::string& suffix = "");

/// Quiet the library's warnings and pin one thread, once per process.
void init_once();

}  // namespace precis::fuzz
