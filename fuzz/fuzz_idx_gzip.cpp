// The IDX reader behind gzip: the fuzz input is the *decompressed* IDX payload, gzip-compressed
// here before it is written, so the fuzzer explores headers and sizes seen through the gzip path
// (fuzz_idx covers damaged gzip streams themselves).
#include <zlib.h>

#include <vector>

#include "fuzz/common.h"
#include "fuzz/idx_readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precis::fuzz::init_once();
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16 /* gzip wrapper */, 8, Z_DEFAULT_STRATEGY) != Z_OK) __builtin_trap();
  std::vector<uint8_t> out(deflateBound(&z, size) + 64);
  z.next_in = const_cast<uint8_t*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) __builtin_trap();
  out.resize(z.total_out);
  deflateEnd(&z);
  const std::string& path = precis::fuzz::write_temp(out.data(), out.size(), "-idx.gz");
  precis::fuzz::read_idx_every_way(path);
  return 0;
}
