#include "data/file_bytes.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <filesystem>

#include "core/error.h"
#include "tensor/file_io.h"

namespace precis::data {

namespace {
constexpr size_t kInputChunk = size_t{64} << 10;  // compressed bytes read from the file at a time
constexpr size_t kOutputChunk = size_t{1} << 20;  // growth step of read_file_bytes' buffer
}  // namespace

struct ByteReader::Impl {
  explicit Impl(const std::string& path) : file(path) {
    unsigned char magic[2] = {0, 0};
    if (file.size() >= 2) file.read_at(0, magic, 2);
    gzip = magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip) {
      // 16 + MAX_WBITS: expect a gzip header and trailer (CRC and length are checked by zlib).
      PRECIS_CHECK_T(IOError, inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, "reading ", path,
                     ": zlib could not be initialised");
      input.resize(kInputChunk);
    }
  }
  ~Impl() {
    if (gzip) inflateEnd(&zs);
  }

  size_t read_plain(unsigned char* dst, size_t n) {
    n = static_cast<size_t>(std::min<uint64_t>(n, file.size() - offset));
    if (n > 0) file.read_at(offset, dst, n);
    offset += n;
    return n;
  }

  size_t read_gzip(unsigned char* dst, size_t n) {
    size_t done = 0;
    while (done < n && !at_end) {
      if (zs.avail_in == 0 && offset < file.size()) {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(kInputChunk, file.size() - offset));
        file.read_at(offset, input.data(), k);
        offset += k;
        zs.next_in = input.data();
        zs.avail_in = static_cast<uInt>(k);
      }
      if (member_ended) {
        // Another gzip member may follow (files made by `cat a.gz b.gz`).
        if (zs.avail_in == 0) {
          at_end = true;
          break;
        }
        PRECIS_CHECK_T(IOError, inflateReset(&zs) == Z_OK, file.path(), ": zlib could not be reset");
        member_ended = false;
      }
      zs.next_out = dst + done;
      zs.avail_out = static_cast<uInt>(std::min<size_t>(n - done, UINT_MAX));
      const uInt before = zs.avail_out;
      const int rc = inflate(&zs, Z_NO_FLUSH);
      done += before - zs.avail_out;
      if (rc == Z_STREAM_END) {
        member_ended = true;
      } else if (rc == Z_BUF_ERROR && zs.avail_in == 0 && offset == file.size()) {
        throw IOError(detail::str_cat("reading ", file.path(), ": the gzip stream is truncated (ended after ",
                                      offset, " compressed bytes, ", delivered + done, " decompressed)"));
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        const std::string msg = zs.msg != nullptr ? zs.msg : "error code " + std::to_string(rc);
        throw IOError(detail::str_cat("reading ", file.path(), ": corrupt gzip data (", msg, ") after ",
                                      delivered + done, " decompressed bytes"));
      }
    }
    return done;
  }

  ReadOnlyFile file;
  bool gzip = false;
  uint64_t offset = 0;     // bytes of the file consumed
  uint64_t delivered = 0;  // (decompressed) bytes handed out
  z_stream zs{};
  std::vector<unsigned char> input;
  bool member_ended = false;
  bool at_end = false;
};

ByteReader::ByteReader(const std::string& path) : impl_(std::make_unique<Impl>(path)) {}
ByteReader::~ByteReader() = default;

size_t ByteReader::read(void* dst, size_t n) {
  auto* p = static_cast<unsigned char*>(dst);
  const size_t got = impl_->gzip ? impl_->read_gzip(p, n) : impl_->read_plain(p, n);
  impl_->delivered += got;
  return got;
}

uint64_t ByteReader::skip(uint64_t n) {
  std::vector<unsigned char> scratch(static_cast<size_t>(std::min<uint64_t>(n, kOutputChunk)));
  uint64_t total = 0;
  while (total < n) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n - total, scratch.size()));
    const size_t got = read(scratch.data(), want);
    total += got;
    if (got < want) break;
  }
  return total;
}

bool ByteReader::compressed() const { return impl_->gzip; }
uint64_t ByteReader::file_size() const { return impl_->file.size(); }
uint64_t ByteReader::position() const { return impl_->delivered; }
const std::string& ByteReader::path() const { return impl_->file.path(); }

std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes, const char* format) {
  ByteReader reader(path);
  std::vector<uint8_t> bytes;
  if (!reader.compressed()) {
    PRECIS_CHECK_T(IOError, reader.file_size() <= max_bytes, "reading ", path, ": the file is ", reader.file_size(),
                   " bytes, more than the ", max_bytes, " a ", format, " may hold");
    bytes.resize(static_cast<size_t>(reader.file_size()));
    const size_t got = reader.read(bytes.data(), bytes.size());
    bytes.resize(got);
    return bytes;
  }
  // Decompress in chunks up to one byte past the limit, so a gzip bomb costs at most max_bytes.
  for (;;) {
    const size_t old = bytes.size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kOutputChunk, max_bytes + 1 - old));
    bytes.resize(old + want);
    const size_t got = reader.read(bytes.data() + old, want);
    bytes.resize(old + got);
    PRECIS_CHECK_T(IOError, bytes.size() <= max_bytes, "reading ", path, ": the gzip data decompresses to more than ",
                   max_bytes, " bytes, the most a ", format, " may hold (", reader.file_size(),
                   " compressed bytes; a decompression bomb or the wrong file?)");
    if (got < want) return bytes;
  }
}

std::string find_plain_or_gz(const std::string& path) {
  // The error_code overloads: the throwing ones raise std::filesystem_error, not a precis::Error.
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return path;
  if (std::filesystem::exists(path + ".gz", ec)) return path + ".gz";
  throw IOError(detail::str_cat("no such file: ", path, " (nor ", path, ".gz)"));
}

}  // namespace precis::data
