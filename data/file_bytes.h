#pragma once
// Whole-file reading for the dataset readers, with transparent gzip decompression.
#include <cstdint>
#include <string>
#include <vector>

namespace precis::data {

/// The bytes of `path`; a gzip file (magic 1f 8b) is decompressed, concatenated members
/// included. IOError naming the file when it cannot be opened or read, or when the gzip stream
/// is corrupt or truncated.
std::vector<uint8_t> read_file_bytes(const std::string& path);

/// `path` if it exists, else `path + ".gz"` if that exists, else IOError naming both.
std::string find_plain_or_gz(const std::string& path);

}  // namespace precis::data
