#include "summary/tfrecord.h"

#include <isa-l/crc.h>

#include <climits>

namespace precis::summary::detail {

uint32_t crc32c(std::string_view data) {
  // ISA-L's crc32_iscsi is the reflected CRC-32C register update without the final inversion;
  // a length past INT_MAX is fed in pieces, the register carried over.
  unsigned int reg = 0xffffffffu;
  auto* p = reinterpret_cast<unsigned char*>(const_cast<char*>(data.data()));
  size_t left = data.size();
  while (left > 0) {
    const int n = left > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(left);
    reg = crc32_iscsi(p, n, reg);
    p += n;
    left -= static_cast<size_t>(n);
  }
  return ~reg;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

namespace {
void append_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
}  // namespace

void append_tfrecord(std::string& out, std::string_view payload) {
  std::string length;
  append_le(length, static_cast<uint64_t>(payload.size()), 8);
  out += length;
  append_le(out, masked_crc32c(length), 4);
  out.append(payload.data(), payload.size());
  append_le(out, masked_crc32c(payload), 4);
}

}  // namespace precis::summary::detail
