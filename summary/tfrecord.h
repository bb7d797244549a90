#pragma once
// TFRecord framing, the container of TensorBoard's events files. Internal to summary/.
//
// A record is: the payload length as a little-endian uint64, the masked CRC-32C of those 8
// bytes (little-endian uint32), the payload, the masked CRC-32C of the payload. CRC-32C
// (Castagnoli) comes from Intel's ISA-L (Debian's libisal); the mask, rotate right by 15 and add
// 0xa282ead8, is the format's own, so that a CRC of data that itself holds CRCs stays strong.
#include <cstdint>
#include <string>
#include <string_view>

namespace precis::summary::detail {

/// The CRC-32C of `data` (initial value and final xor 0xffffffff: crc32c("123456789") = 0xe3069283).
uint32_t crc32c(std::string_view data);
/// The masked CRC-32C TFRecord stores.
uint32_t masked_crc32c(std::string_view data);
/// Appends `payload` framed as one TFRecord to `out`.
void append_tfrecord(std::string& out, std::string_view payload);

}  // namespace precis::summary::detail
