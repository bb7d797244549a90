#pragma once
// Reading dataset files, with transparent gzip decompression. Every reader states how many bytes
// its format can hold, and decompression stops there: a small gzip file that inflates to
// gigabytes is refused after inflating at most the format's limit (plus one chunk), not after
// filling memory.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace precis::data {

/// A file read front to back; a gzip file (magic 1f 8b) is decompressed as it is read,
/// concatenated members included. Only regular files open: a directory, FIFO or device raises
/// IOError naming the path and what it is. Read errors and corrupt or truncated gzip data raise
/// IOError naming the file.
class ByteReader {
 public:
  /// Opens `path` and detects gzip from its first two bytes; IOError when it cannot be opened.
  explicit ByteReader(const std::string& path);
  ~ByteReader();
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  /// Reads up to n bytes into dst; returns fewer only at the end of the data.
  size_t read(void* dst, size_t n);
  /// Reads and discards up to n bytes; returns how many there were.
  uint64_t skip(uint64_t n);
  /// True when the file is gzip-compressed.
  bool compressed() const;
  /// The size of the file on disk (the compressed size for gzip).
  uint64_t file_size() const;
  /// Decompressed bytes delivered so far (read or skipped).
  uint64_t position() const;
  const std::string& path() const;  ///< the path given to the constructor

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The (decompressed) bytes of `path`. `max_bytes` is the most its format can hold, and
/// `format` names that format for the message: more data raises IOError saying so. Other failures
/// as for ByteReader.
std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes, const char* format);

/// `path` if it exists, else `path + ".gz"` if that exists, else IOError naming both.
std::string find_plain_or_gz(const std::string& path);

}  // namespace precis::data
