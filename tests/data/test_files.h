#pragma once
// Helpers for tests that write small data files: a scratch folder (tests/support/scratch_dir.h) and
// gzip encoding (stored deflate blocks, so the tests need no zlib of their own).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tests/support/scratch_dir.h"

namespace precis::data::testing {

/// A fresh empty folder under the system temp dir, removed on destruction.
using precis::testing::ScratchDir;

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);
void write_text(const std::string& path, const std::string& text);
/// A valid gzip stream holding `data` (stored, uncompressed deflate blocks).
std::vector<uint8_t> gzip_stored(const std::vector<uint8_t>& data);
/// An IDX file: magic (0, 0, type, dims.size()), big-endian u32 dims, then `payload`.
std::vector<uint8_t> idx_bytes(uint8_t type_code, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload);

/// REQUIREs that fn throws IOError (not another precis::Error, not std::bad_alloc) with every
/// part in its message.
void require_io_error(const std::function<void()>& fn, const std::vector<std::string>& parts);

}  // namespace precis::data::testing
