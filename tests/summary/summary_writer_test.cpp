// SummaryWriter's files read back with a reader written here from the TFRecord format (uint64
// length, masked CRC-32C of it, payload, masked CRC-32C of the payload; little endian) and decoded
// with the protoc-generated Event classes. The reader shares no code with the writer: its CRC is
// ISA-L's called directly, its mask and framing are written from the format description.
#include <isa-l/crc.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "summary/summary_writer.h"
#include "summary/tensorboard.pb.h"
#include "tensor/factory.h"

namespace fs = std::filesystem;
using namespace precis;
namespace pb = precis::tensorboard;

namespace {

uint32_t spec_crc32c(const std::string& s) {
  return ~crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(s.data())), static_cast<int>(s.size()),
                      0xffffffffu);
}
uint32_t spec_masked(const std::string& s) {
  const uint32_t c = spec_crc32c(s);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<size_t>(i)]);
  return v;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every record of an events file, checked against both CRCs; throws naming the offset otherwise.
std::vector<pb::Event> read_events(const std::string& path) {
  const std::string bytes = slurp(path);
  std::vector<pb::Event> out;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) throw std::runtime_error("truncated header at " + std::to_string(at));
    const std::string len_bytes = bytes.substr(at, 8);
    const uint64_t len = le(bytes, at, 8);
    if (le(bytes, at + 8, 4) != spec_masked(len_bytes))
      throw std::runtime_error("length CRC mismatch at " + std::to_string(at));
    if (bytes.size() - at - 12 < len + 4) throw std::runtime_error("truncated record at " + std::to_string(at));
    const std::string payload = bytes.substr(at + 12, len);
    if (le(bytes, at + 12 + len, 4) != spec_masked(payload))
      throw std::runtime_error("payload CRC mismatch at " + std::to_string(at));
    pb::Event e;
    if (!e.ParseFromString(payload)) throw std::runtime_error("not an Event at " + std::to_string(at));
    out.push_back(std::move(e));
    at += 12 + len + 4;
  }
  return out;
}

struct TempDir {
  fs::path path;
  TempDir() {
    static int n = 0;
    path = fs::temp_directory_path() /
           ("precis_summary_test." + std::to_string(::getpid()) + "." + std::to_string(n++));
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("summary: the test's CRC-32C is the Castagnoli CRC", "[summary]") {
  CHECK(spec_crc32c("123456789") == 0xe3069283u);  // the standard check value (RFC 3720)
  CHECK(spec_crc32c("") == 0u);
}

TEST_CASE("summary: scalars, text and histograms read back from the events file", "[summary]") {
  TempDir dir;
  std::string path;
  {
    summary::SummaryWriter w(dir.path.string(), {.filename_suffix = ".test"});
    path = w.file_path();
    CHECK(w.log_dir() == dir.path.string());
    for (int64_t step = 1; step <= 25; ++step) w.add_scalar("train/loss", 1.0 / static_cast<double>(step), step, 1000.0 + step);
    w.add_scalar("train/loss_scale", 65536.0, 3);
    w.add_text("run", "resnet20 **bf16**", 0);
    w.add_histogram("weights/w", from_vector<float>({-1.f, 0.f, 0.5f, 1.f, 1.f, NAN}), 7, 4);
  }  // destruction flushes
  const std::string name = fs::path(path).filename().string();
  CHECK(name.rfind("events.out.tfevents.", 0) == 0);
  CHECK(name.size() > 7);
  CHECK(name.substr(name.size() - 5) == ".test");

  const std::vector<pb::Event> ev = read_events(path);
  REQUIRE(ev.size() == 1 + 25 + 1 + 1 + 1);
  CHECK(ev[0].file_version() == "brain.Event:2");
  for (int64_t step = 1; step <= 25; ++step) {
    const pb::Event& e = ev[static_cast<size_t>(step)];
    CHECK(e.step() == step);
    CHECK(e.wall_time() == 1000.0 + static_cast<double>(step));
    REQUIRE(e.summary().value_size() == 1);
    CHECK(e.summary().value(0).tag() == "train/loss");
    CHECK(e.summary().value(0).simple_value() == static_cast<float>(1.0 / static_cast<double>(step)));
  }
  CHECK(ev[26].summary().value(0).tag() == "train/loss_scale");
  CHECK(ev[26].summary().value(0).simple_value() == 65536.0f);
  CHECK(ev[26].wall_time() > 1.6e9);  // now, in seconds since the epoch

  const pb::Summary::Value& text = ev[27].summary().value(0);
  CHECK(text.tag() == "run");
  CHECK(text.metadata().plugin_data().plugin_name() == "text");
  CHECK(text.tensor().dtype() == pb::DT_STRING);
  REQUIRE(text.tensor().tensor_shape().dim_size() == 1);
  CHECK(text.tensor().tensor_shape().dim(0).size() == 1);
  REQUIRE(text.tensor().string_val_size() == 1);
  CHECK(text.tensor().string_val(0) == "resnet20 **bf16**");

  const pb::Summary::Value& hv = ev[28].summary().value(0);
  CHECK(ev[28].step() == 7);
  CHECK(hv.tag() == "weights/w");
  REQUIRE(hv.has_histo());
  const pb::HistogramProto& h = hv.histo();
  CHECK(h.min() == -1.0);
  CHECK(h.max() == 1.0);
  CHECK(h.num() == 5.0);  // the NaN is left out
  CHECK(h.sum() == 1.5);
  CHECK(h.sum_squares() == 3.25);
  // Four buckets of width 0.5 over [-1, 1]: (-1), (0), (0.5), (1, 1).
  REQUIRE(h.bucket_limit_size() == 4);
  REQUIRE(h.bucket_size() == 4);
  const std::vector<double> limits = {-0.5, 0.0, 0.5, 1.0}, counts = {1, 0, 1, 3};
  for (int i = 0; i < 4; ++i) {
    CHECK(h.bucket_limit(i) == limits[static_cast<size_t>(i)]);
    CHECK(h.bucket(i) == counts[static_cast<size_t>(i)]);
  }
}

TEST_CASE("summary: the reader catches a corrupted byte and a cut file", "[summary]") {
  TempDir dir;
  std::string path;
  {
    summary::SummaryWriter w(dir.path.string());
    path = w.file_path();
    w.add_scalar("a", 2.5, 1);
  }
  const std::string good = slurp(path);
  REQUIRE(read_events(path).size() == 2);
  for (size_t at : {size_t{3}, good.size() - 10, good.size() - 1}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x20);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
    CHECK_THROWS(read_events(path));
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << good.substr(0, good.size() - 2);
  CHECK_THROWS(read_events(path));
}

TEST_CASE("summary: events wait in the queue until max_queue, flush() or the periodic flush", "[summary]") {
  TempDir dir;
  summary::SummaryWriter w(dir.path.string(), {.max_queue = 3, .flush_secs = 1000});
  const std::string path = w.file_path();
  CHECK(read_events(path).size() == 1);  // the version record is written at once
  w.add_scalar("x", 1, 1);
  w.add_scalar("x", 2, 2);
  CHECK(read_events(path).size() == 1);
  w.add_scalar("x", 3, 3);  // the third pending event writes the queue out
  CHECK(read_events(path).size() == 4);
  w.add_scalar("x", 4, 4);
  w.flush();
  CHECK(read_events(path).size() == 5);
  w.close();
  CHECK_THROWS_AS(w.add_scalar("x", 5, 5), StateError);

  summary::SummaryWriter timed(dir.path.string(), {.max_queue = 1000, .flush_secs = 0.05});
  timed.add_scalar("y", 1, 1);
  bool seen = false;
  for (int i = 0; i < 200 && !seen; ++i) {  // up to 10 s on a loaded machine
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    seen = read_events(timed.file_path()).size() == 2;
  }
  CHECK(seen);
}

TEST_CASE("summary: purge_step starts the file with a session START at that step", "[summary]") {
  TempDir dir;
  summary::SummaryWriter w(dir.path.string(), {.purge_step = 101});
  w.add_scalar("x", 1, 101);
  w.flush();
  const std::vector<pb::Event> ev = read_events(w.file_path());
  REQUIRE(ev.size() == 3);
  CHECK(ev[1].step() == 101);
  CHECK(ev[1].session_log().status() == pb::SessionLog::START);
  CHECK(ev[2].step() == 101);
}

TEST_CASE("summary: histograms of a constant, of a bf16 tensor, and of nothing finite", "[summary]") {
  TempDir dir;
  summary::SummaryWriter w(dir.path.string());
  w.add_histogram("c", full({5}, 2.0, {.dtype = DType::f32}), 1, 3);
  w.add_histogram("bf", from_vector<float>({0.f, 1.f, 2.f, 3.f}).to(DType::bf16), 2, 2);
  w.add_histogram("nan", full({3}, NAN, {.dtype = DType::f32}), 3);  // writes nothing
  w.flush();
  const std::vector<pb::Event> ev = read_events(w.file_path());
  REQUIRE(ev.size() == 3);
  const pb::HistogramProto& c = ev[1].summary().value(0).histo();
  CHECK(c.min() == 2.0);
  CHECK(c.max() == 2.0);
  CHECK(c.num() == 5.0);
  CHECK(c.bucket(0) + c.bucket(1) + c.bucket(2) == 5.0);
  const pb::HistogramProto& bf = ev[2].summary().value(0).histo();
  CHECK(bf.num() == 4.0);
  CHECK(bf.bucket(0) == 2.0);  // [0, 1.5): 0, 1
  CHECK(bf.bucket(1) == 2.0);  // [1.5, 3]: 2, 3
}

TEST_CASE("summary: bad arguments are errors naming the call", "[summary]") {
  TempDir dir;
  summary::SummaryWriter w(dir.path.string());
  CHECK_THROWS_AS(w.add_histogram("h", from_vector<float>({1.f}), 0, 0), ValueError);
  CHECK_THROWS_AS(w.add_histogram("h", Tensor(), 0), ValueError);
  CHECK_THROWS_AS(w.add_histogram("h", from_vector<int64_t>({1, 2}), 0), DTypeError);
  CHECK_THROWS_AS(summary::SummaryWriter(dir.path.string(), {.max_queue = 0}), ValueError);
  CHECK_THROWS_AS(summary::SummaryWriter(dir.path.string(), {.flush_secs = 0}), ValueError);
  CHECK_THROWS_AS(summary::SummaryWriter(dir.path.string(), {.filename_suffix = "a/b"}), ValueError);
  // A log_dir below a regular file cannot be created.
  const fs::path file = dir.path / "plain";
  std::ofstream(file) << "x";
  CHECK_THROWS_AS(summary::SummaryWriter((file / "sub").string()), IOError);
}

// TensorBoard reads a folder's files in name order; a resumed run's file must come after the
// interrupted run's even when both opened in the same second (writer 10 sorted before writer 9).
TEST_CASE("summary: a process's event files sort in the order they were opened", "[summary]") {
  TempDir dir;
  std::vector<std::string> opened;
  for (int i = 0; i < 12; ++i) opened.push_back(summary::SummaryWriter(dir.path.string()).file_path());
  std::vector<std::string> sorted = opened;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(sorted == opened);
}

// What precis-train prints when --tensorboard cannot be written: the folder and the system's
// reason, not the class's name.
TEST_CASE("summary: a log folder that cannot be made names itself and the system's reason", "[summary]") {
  TempDir dir;
  fs::create_directories(dir.path);
  const fs::path file = dir.path / "plain";
  std::ofstream(file) << "x";
  REQUIRE(fs::is_regular_file(file));
  const std::string where = (file / "sub").string();
  try {
    summary::SummaryWriter w(where);
    FAIL("no IOError");
  } catch (const IOError& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Matchers::Contains("'" + where + "'") && Catch::Matchers::Contains("Not a directory"));
    CHECK_THAT(m, !Catch::Matchers::Contains("SummaryWriter"));
  }
}
