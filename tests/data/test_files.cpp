#include "test_files.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <stdexcept>

#include "core/error.h"

namespace precis::data::testing {

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

namespace {
uint32_t crc32(const std::vector<uint8_t>& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t b : data) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}
void put_le32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
}  // namespace

std::vector<uint8_t> gzip_stored(const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255};
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, data.size() - pos);
    const bool last = pos + n == data.size();
    out.push_back(last ? 1 : 0);  // BFINAL, BTYPE = 00 (stored)
    out.push_back(static_cast<uint8_t>(n));
    out.push_back(static_cast<uint8_t>(n >> 8));
    out.push_back(static_cast<uint8_t>(~n));
    out.push_back(static_cast<uint8_t>(~n >> 8));
    out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(pos),
               data.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
  } while (pos < data.size());
  put_le32(out, crc32(data));
  put_le32(out, static_cast<uint32_t>(data.size()));
  return out;
}

std::vector<uint8_t> idx_bytes(uint8_t type_code, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = {0, 0, type_code, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(d >> s));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void require_io_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    FAIL("no IOError");
  } catch (const IOError& e) {
    for (const std::string& p : parts) REQUIRE_THAT(e.what(), Catch::Contains(p));
  }
}

}  // namespace precis::data::testing
