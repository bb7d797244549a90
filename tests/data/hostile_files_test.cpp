// Dataset files that are not what a reader expects (issue 13): a directory or a device where a file
// should be, a header whose dims overflow, a small gzip file that inflates without end. Each used
// to end in a bare std::bad_alloc (a directory's size read as 2^63 - 1), undefined behaviour, or
// hundreds of megabytes inflated before rejection; each now raises IOError naming the path.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/cifar.h"
#include "data/file_bytes.h"
#include "data/idx.h"
#include "data/text/corpus.h"
#include "data/text/wordpiece.h"
#include "test_files.h"

using namespace precis;
using namespace precis::data;
using namespace precis::data::testing;

namespace {

// A gzip file holding `prefix` followed by `zeros` zero bytes, compressed for real (deflate level 9
// makes 80 MiB of zeros about 80 KB) and streamed, so the test never holds the inflated data.
std::vector<uint8_t> gzip_bomb(const std::vector<uint8_t>& prefix, size_t zeros) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(size_t{1} << 20, 0);
  std::vector<uint8_t> buf(size_t{1} << 16);
  auto feed = [&](const uint8_t* p, size_t n, int flush) {
    zs.next_in = const_cast<Bytef*>(p);
    zs.avail_in = static_cast<uInt>(n);
    do {
      zs.next_out = buf.data();
      zs.avail_out = static_cast<uInt>(buf.size());
      const int rc = deflate(&zs, flush);
      REQUIRE(rc != Z_STREAM_ERROR);
      out.insert(out.end(), buf.data(), buf.data() + (buf.size() - zs.avail_out));
    } while (zs.avail_out == 0 || (flush == Z_FINISH && zs.avail_in > 0));
  };
  feed(prefix.data(), prefix.size(), Z_NO_FLUSH);
  for (size_t left = zeros; left > 0;) {
    const size_t n = std::min(left, chunk.size());
    feed(chunk.data(), n, Z_NO_FLUSH);
    left -= n;
  }
  feed(nullptr, 0, Z_FINISH);
  deflateEnd(&zs);
  return out;
}


}  // namespace

TEST_CASE("readers refuse a directory where a file is expected, naming it", "[data][hostile]") {
  ScratchDir dir;
  const std::string sub = dir.file("looks-like-a-file");
  std::filesystem::create_directory(sub);
  const std::vector<std::string> is_dir = {sub, "is a directory, not a regular file"};
  require_io_error([&] { read_idx(sub); }, is_dir);
  require_io_error([&] { read_idx_images(sub); }, is_dir);
  require_io_error([&] { read_vocab(sub); }, is_dir);
  require_io_error([&] { WordPieceTokenizer::from_file(sub); }, is_dir);
  require_io_error([&] { ByteReader r(sub); }, is_dir);
  require_io_error([&] { read_file_bytes(sub, 100, "test file"); }, is_dir);
  std::vector<uint8_t> labels, pixels;
  require_io_error([&] { read_cifar10_file(sub, labels, pixels); }, is_dir);

  // MNIST with its image file a directory: the label file is fine.
  const std::string image_dir = dir.file("t10k-images-idx3-ubyte");
  std::filesystem::create_directory(image_dir);
  write_bytes(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x08, {2}, {0, 1}));
  require_io_error([&] { MnistDataset(dir.path().string(), false); }, {image_dir, "is a directory"});
  // CIFAR-10 with test_batch.bin a directory.
  std::filesystem::create_directory(dir.file("test_batch.bin"));
  require_io_error([&] { Cifar10Dataset(dir.path().string(), false); }, {"test_batch.bin", "is a directory"});
}

TEST_CASE("readers refuse devices and FIFOs without blocking on them", "[data][hostile]") {
  // /dev/zero is endless: reading it whole would never finish.
  require_io_error([&] { read_idx("/dev/zero"); }, {"/dev/zero", "a character device"});
  require_io_error([&] { read_text_lines("/dev/null"); }, {"a character device"});
  // Opening a FIFO for reading waits for a writer; the reader must refuse it without opening it
  // for blocking reads (this test would hang otherwise).
  ScratchDir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  require_io_error([&] { read_vocab(fifo); }, {fifo, "FIFO"});
  require_io_error([&] { read_text_lines(fifo); }, {"FIFO"});
}

TEST_CASE("idx: dims whose product overflows are refused before multiplying past int64", "[data][hostile]") {
  ScratchDir dir;
  // Three dims of 2^32 - 1: the product passed 2^63 (undefined behaviour) before the check.
  write_bytes(dir.file("huge"), idx_bytes(0x08, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {1, 2, 3}));
  require_io_error([&] { read_idx(dir.file("huge")); },
                   {dir.file("huge"), "implausible dims", "[4294967295, 4294967295]"});
  // 2^20 · 2^20 · 2: one past the 2^40-element plausibility limit, checked before any allocation.
  write_bytes(dir.file("big"), idx_bytes(0x0E, {1u << 20, 1u << 20, 2}, {}));
  require_io_error([&] { read_idx(dir.file("big")); }, {"implausible dims"});
  // A header within the limit on a file too short for it: truncated, without allocating 2^40 bytes.
  write_bytes(dir.file("short.gz"), gzip_stored(idx_bytes(0x08, {1u << 20, 1u << 20}, {1, 2, 3})));
  require_io_error([&] { read_idx(dir.file("short.gz")); }, {"truncated data", "the file has 3"});
  // A hand-built IdxArray whose bytes do not match its dims is refused, not read past its end.
  IdxArray a;
  a.type_code = 0x08;
  a.dims = {4, 4};
  a.bytes = {1, 2, 3};
  REQUIRE_THROWS_AS(idx_to_tensor(a), ShapeError);
  REQUIRE_THROWS_WITH(idx_to_tensor(a), Catch::Contains("need 16 x 1 bytes, the array holds 3"));
}

TEST_CASE("gzip bombs are refused at the format's size, not after inflating everything", "[data][hostile]") {
  ScratchDir dir;
  // An IDX header for 18 bytes, then 8 MiB of zeros: rejected after counting 1 MiB of extra bytes.
  const auto idx = idx_bytes(0x08, {2, 3, 3}, std::vector<uint8_t>(18, 7));
  write_bytes(dir.file("idx-bomb.gz"), gzip_bomb(idx, size_t{8} << 20));
  require_io_error([&] { read_idx(dir.file("idx-bomb.gz")); }, {"more than 1048576 unexpected bytes", "[2, 3, 3]"});
  // The same header with its 18 bytes and nothing else still reads (the gzip is real deflate).
  write_bytes(dir.file("idx-ok.gz"), gzip_bomb(idx, 0));
  REQUIRE(read_idx(dir.file("idx-ok.gz")).bytes == std::vector<uint8_t>(18, 7));

  // A vocabulary: rejected after 64 MiB + 1 byte of output, not 80 MiB.
  const std::vector<uint8_t> token = {'a', '\n'};
  write_bytes(dir.file("vocab.txt.gz"), gzip_bomb(token, size_t{80} << 20));
  require_io_error([&] { read_vocab(dir.file("vocab.txt.gz")); },
                   {"vocab.txt.gz", "decompresses to more than 67108864 bytes"});
  // A CIFAR-10 batch: 10000 records of 3073 bytes at most (30.7 MB; the bomb inflates to 40 MiB).
  write_bytes(dir.file("data.bin.gz"), gzip_bomb({}, size_t{40} << 20));
  std::vector<uint8_t> labels, pixels;
  require_io_error([&] { read_cifar10_file(dir.file("data.bin.gz"), labels, pixels); },
                   {"more than 30730000 bytes", "CIFAR-10"});
  // A plain file over the limit is refused from its size, before reading.
  write_bytes(dir.file("big.txt"), std::vector<uint8_t>(101, 'x'));
  require_io_error([&] { read_file_bytes(dir.file("big.txt"), 100, "test file"); },
                   {"101 bytes, more than the 100 a test file may hold"});
  REQUIRE(read_file_bytes(dir.file("big.txt"), 101, "test file").size() == 101);
}

TEST_CASE("ByteReader delivers gzip members and plain files in pieces", "[data][hostile]") {
  ScratchDir dir;
  std::vector<uint8_t> data(300000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 % 251);
  write_bytes(dir.file("plain"), data);
  write_bytes(dir.file("packed.gz"), gzip_stored(data));
  for (const char* name : {"plain", "packed.gz"}) {
    INFO(name);
    ByteReader r(dir.file(name));
    REQUIRE(r.compressed() == (std::string(name) == "packed.gz"));
    std::vector<uint8_t> got(7);
    REQUIRE(r.read(got.data(), 7) == 7);
    REQUIRE(std::equal(got.begin(), got.end(), data.begin()));
    REQUIRE(r.skip(100000) == 100000);
    REQUIRE(r.position() == 100007);
    std::vector<uint8_t> rest(data.size());
    REQUIRE(r.read(rest.data(), rest.size()) == data.size() - 100007);
    REQUIRE(std::equal(data.begin() + 100007, data.end(), rest.begin()));
    REQUIRE(r.read(rest.data(), 1) == 0);
    REQUIRE(r.skip(5) == 0);
  }
}
