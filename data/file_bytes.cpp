#include "data/file_bytes.h"

#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace precis::data {

namespace {

std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& path) {
  std::vector<uint8_t> out;
  out.reserve(in.size() * 2);
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header and trailer (CRC and length are checked by zlib).
  PRECIS_CHECK_T(IOError, inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, "read_file_bytes: ", path,
                 ": zlib could not be initialised");
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  constexpr size_t kChunk = size_t{1} << 20;
  int rc = Z_OK;
  for (;;) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    zs.next_out = out.data() + old;
    zs.avail_out = static_cast<uInt>(kChunk);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(old + (kChunk - zs.avail_out));
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow (files made by `cat a.gz b.gz`).
      if (zs.avail_in == 0) break;
      if (inflateReset(&zs) != Z_OK) break;
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      throw IOError(detail::str_cat("read_file_bytes: ", path, ": the gzip stream is truncated (ended after ",
                                    in.size(), " compressed bytes, ", out.size(), " decompressed)"));
    }
    const std::string msg = zs.msg != nullptr ? zs.msg : "error code " + std::to_string(rc);
    inflateEnd(&zs);
    throw IOError(detail::str_cat("read_file_bytes: ", path, ": corrupt gzip data (", msg, ")"));
  }
  inflateEnd(&zs);
  return out;
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  PRECIS_CHECK_T(IOError, f.is_open(), "read_file_bytes: cannot open ", path,
                 std::filesystem::exists(path) ? " (permission denied or not a regular file)" : " (no such file)");
  const std::streamoff size = f.tellg();
  PRECIS_CHECK_T(IOError, size >= 0, "read_file_bytes: cannot determine the size of ", path);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  f.seekg(0);
  if (size > 0) f.read(reinterpret_cast<char*>(bytes.data()), size);
  PRECIS_CHECK_T(IOError, f.good() || (size == 0 && !f.bad()), "read_file_bytes: reading ", path, " failed");
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) return gunzip(bytes, path);
  return bytes;
}

std::string find_plain_or_gz(const std::string& path) {
  if (std::filesystem::exists(path)) return path;
  if (std::filesystem::exists(path + ".gz")) return path + ".gz";
  throw IOError(detail::str_cat("no such file: ", path, " (nor ", path, ".gz)"));
}

}  // namespace precis::data
