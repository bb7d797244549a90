// safetensors: round trips, the golden fixture written by the reference implementation, atomic
// writes, and rejection of every kind of malformed file.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "ops/backends.h"
#include "tensor/json.h"
#include "tensor/safetensors.h"
#include "tests/support/paths.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/tensor_testing.h"

namespace fs = std::filesystem;
using namespace precis;
using namespace std::string_literals;

namespace {

// The bytes of a tensor as stored (contiguous, native = little-endian here).
std::string raw_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()) * c.element_size());
}

void require_same(const Tensor& got, const Tensor& want) {
  INFO("got " << got.describe() << ", want " << want.describe());
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.is_contiguous());
  REQUIRE(raw_bytes(got) == raw_bytes(want));  // bit-exact, NaN payloads included
}

// A file from a header text and a data buffer; the header is space-padded to 8 unless told not to.
std::string make_file(std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

std::string with_length(uint64_t n, const std::string& rest) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + rest;
}

// A directory removed (with its contents) at the end of the test.
using TempDir = testing::ScratchDir;

NamedTensors sample_tensors() {
  Tensor base = arange(12.0, {.dtype = DType::f64}).view({3, 4});
  return {
      {"f32", from_vector<float>({1.5f, -0.0f, INFINITY, NAN, 1e-45f, -3.4e38f}, {2, 3})},
      {"f64.transposed", base.t()},  // non-contiguous
      {"f16", from_vector<float>({1.0f, -2.5f, 65504.0f, 6e-8f}).to(DType::f16)},
      {"bf16", from_vector<float>({1.0f, 3.14159f, -0.5f, 1e38f, NAN}).to(DType::bf16)},
      {"i64", from_vector<int64_t>({INT64_MIN, INT64_MAX, 0, -1}, {2, 2})},
      {"i32.scalar", scalar_tensor(int64_t{-42}, {.dtype = DType::i32})},
      {"bool", from_vector<bool>({true, false, true})},
      {"empty", zeros({0, 5})},
      {"expanded", from_vector<float>({7.0f, 8.0f}, {2, 1}).expand({2, 3})},  // stride 0
      {"strided", arange(10.0, {.dtype = DType::i64}).slice(0, 1, 10, 3)},    // offset and step
  };
}

std::string sample_file() { return to_safetensors_bytes(sample_tensors(), {{"k", "v"}}); }

// The header of a file written by precis, parsed.
json::Value header_of(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return json::parse(std::string_view(bytes).substr(8, n), "test");
}

}  // namespace

TEST_CASE("safetensors round trip keeps every dtype and shape bit-exactly", "[tensor][safetensors]") {
  const NamedTensors in = sample_tensors();
  const SafetensorsFile out = from_safetensors_bytes(to_safetensors_bytes(in));
  REQUIRE(out.tensors.size() == in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    INFO(in[i].first);
    REQUIRE(out.tensors[i].first == in[i].first);  // header order = insertion order
    require_same(out.tensors[i].second, in[i].second);
    REQUIRE_FALSE(out.tensors[i].second.requires_grad());
  }
  REQUIRE(out.get("i32.scalar").dim() == 0);
  REQUIRE(out.get("i32.scalar").item<int64_t>() == -42);
  REQUIRE(out.get("empty").sizes() == Shape{0, 5});
  REQUIRE(out.metadata.empty());
}

TEST_CASE("safetensors loaded tensors own their memory", "[tensor][safetensors]") {
  const SafetensorsFile f = from_safetensors_bytes(to_safetensors_bytes({{"a", ones({3})}, {"b", ones({2})}}));
  Tensor a = f.get("a"), b = f.get("b");
  a.fill_(5.0);
  REQUIRE(b.to_vector<float>() == std::vector<float>{1, 1});
  REQUIRE(a.impl()->storage() != b.impl()->storage());
}

TEST_CASE("safetensors header layout: length and padding and aligned data in insertion order", "[tensor][safetensors]") {
  const std::string bytes = sample_file();
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  REQUIRE(n % 8 == 0);
  REQUIRE(8 + n <= bytes.size());
  const std::string header = bytes.substr(8, n);
  REQUIRE(header.front() == '{');
  REQUIRE(header.find_last_not_of(' ') == header.rfind('}'));  // only spaces after the JSON
  const json::Value h = header_of(bytes);
  REQUIRE(h.object.front().first == "__metadata__");
  const NamedTensors in = sample_tensors();
  for (size_t i = 0; i < in.size(); ++i) {
    const auto& [name, v] = h.object[i + 1];
    REQUIRE(name == in[i].first);
    // Each tensor's data starts at a multiple of its element size (file offset 8 + n is too).
    const int64_t begin = v.find("data_offsets")->array[0].integer;
    INFO(name << " begins at " << begin);
    REQUIRE(begin % static_cast<int64_t>(in[i].second.element_size()) == 0);
  }
  REQUIRE(h.find("f16")->find("dtype")->string == "F16");
  REQUIRE(h.find("bf16")->find("dtype")->string == "BF16");
  REQUIRE(h.find("bool")->find("dtype")->string == "BOOL");
  REQUIRE(h.find("i32.scalar")->find("shape")->array.empty());
}

TEST_CASE("safetensors metadata and names with special characters round trip", "[tensor][safetensors]") {
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"quote \"and\" backslash \\", "line\nbreak\ttab\x01"}, {"unicode", "h\xC3\xA9llo \xE2\x9C\x93"},
      {"empty", ""}};
  const std::string name = "layer.0/\xE2\x9C\x93 \"w\"";
  const SafetensorsFile f = from_safetensors_bytes(to_safetensors_bytes({{name, ones({2})}}, meta));
  REQUIRE(f.metadata == meta);
  REQUIRE(f.names() == std::vector<std::string>{name});
  REQUIRE(f.contains(name));
  REQUIRE_FALSE(f.contains("other"));
}

TEST_CASE("safetensors with no tensors", "[tensor][safetensors]") {
  const std::string bytes = to_safetensors_bytes({});
  REQUIRE(bytes.size() == 16);  // length + "{}" padded to 8
  const SafetensorsFile f = from_safetensors_bytes(bytes);
  REQUIRE(f.tensors.empty());
  REQUIRE(f.metadata.empty());
}

TEST_CASE("safetensors get() suggests close names", "[tensor][safetensors]") {
  const SafetensorsFile f = from_safetensors_bytes(to_safetensors_bytes(
      {{"layer.0.weight", ones({1})}, {"layer.0.bias", ones({1})}, {"layer.1.weight", ones({1})}}));
  PRECIS_REQUIRE_THROWS_WITH_ALL(f.get("layer.0.weigth"), ValueError, "layer.0.weigth", "did you mean",
                                 "'layer.0.weight'");
  PRECIS_REQUIRE_THROWS_WITH_ALL(f.get("completely_different_name"), ValueError, "no tensor named", "3 tensors");
  REQUIRE(f.get("layer.1.weight").numel() == 1);
}

TEST_CASE("save_safetensors rejects bad names", "[tensor][safetensors]") {
  PRECIS_REQUIRE_THROWS_WITH_ALL(to_safetensors_bytes({{"a", ones({1})}, {"a", ones({1})}}), ValueError, "duplicate",
                                 "'a'");
  PRECIS_REQUIRE_THROWS_WITH_ALL(to_safetensors_bytes({{"__metadata__", ones({1})}}), ValueError, "reserved");
  PRECIS_REQUIRE_THROWS_WITH_ALL(to_safetensors_bytes({{"", ones({1})}}), ValueError, "empty");
  PRECIS_REQUIRE_THROWS_WITH_ALL(to_safetensors_bytes({{"bad\xFF", ones({1})}}), ValueError, "UTF-8");
  PRECIS_REQUIRE_THROWS_WITH_ALL(to_safetensors_bytes({{"u", Tensor()}}), ValueError, "undefined");
}

// ---- files --------------------------------------------------------------------------------------
TEST_CASE("save_safetensors writes atomically and leaves no temporary files", "[tensor][safetensors]") {
  TempDir dir;
  const std::string path = (dir.path() / "model.safetensors").string();
  save_safetensors(path, sample_tensors(), {{"step", "1"}});
  REQUIRE(dir.entries() == std::vector<std::string>{"model.safetensors"});
  SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.metadata.at("step") == "1");
  REQUIRE(f.tensors.size() == sample_tensors().size());

  // Overwriting replaces the file as a whole.
  save_safetensors(path, {{"only", full({2}, 3.0)}}, {{"step", "2"}});
  REQUIRE(dir.entries() == std::vector<std::string>{"model.safetensors"});
  f = load_safetensors(path);
  REQUIRE(f.names() == std::vector<std::string>{"only"});
  REQUIRE(f.metadata.at("step") == "2");

  // The file on disk is exactly the in-memory encoding.
  std::ifstream in(path, std::ios::binary);
  const std::string on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(on_disk == to_safetensors_bytes({{"only", full({2}, 3.0)}}, {{"step", "2"}}));
}

TEST_CASE("a failed save leaves the previous file intact and no temporary file", "[tensor][safetensors]") {
  TempDir dir;
  const std::string path = (dir.path() / "ckpt.safetensors").string();
  save_safetensors(path, {{"w", full({4}, 1.0)}});

  // Bad input is found before anything is written.
  REQUIRE_THROWS_AS(save_safetensors(path, {{"w", ones({1})}, {"w", ones({1})}}), ValueError);
  REQUIRE(dir.entries() == std::vector<std::string>{"ckpt.safetensors"});

  if (device_copy() == nullptr) {
    // Without CUDA, copying a "CUDA" tensor to the CPU fails while the data is being written:
    // the header and the first tensor are already in the temporary file by then.
    float host[4] = {0, 0, 0, 0};
    Tensor on_gpu = from_blob(host, {4}, DType::f32, Device::cuda());
    REQUIRE_THROWS_AS(save_safetensors(path, {{"first", ones({8}, {.dtype = DType::f64})}, {"gpu", on_gpu}}),
                      DeviceError);
    REQUIRE(dir.entries() == std::vector<std::string>{"ckpt.safetensors"});
  }
  REQUIRE(load_safetensors(path).get("w").to_vector<float>() == std::vector<float>{1, 1, 1, 1});
}

TEST_CASE("safetensors file errors name the file", "[tensor][safetensors]") {
  TempDir dir;
  const std::string missing = (dir.path() / "missing.safetensors").string();
  PRECIS_REQUIRE_THROWS_WITH_ALL(load_safetensors(missing), IOError, "missing.safetensors", "No such file");
  PRECIS_REQUIRE_THROWS_WITH_ALL(load_safetensors(dir.path().string()), IOError, "not a regular file");
  PRECIS_REQUIRE_THROWS_WITH_ALL(save_safetensors((dir.path() / "no_dir" / "x.safetensors").string(), {}), IOError,
                                 "no_dir");
  REQUIRE(dir.entries().empty());

  const std::string bad = (dir.path() / "bad.safetensors").string();
  std::ofstream(bad, std::ios::binary) << with_length(1000, "{}");
  PRECIS_REQUIRE_THROWS_WITH_ALL(load_safetensors(bad), IOError, "bad.safetensors", "header length 1000");
}

// ---- the golden fixture from the reference implementation ---------------------------------------
TEST_CASE("safetensors reads the fixture written by the reference implementation", "[tensor][safetensors]") {
  const std::string dir = testing::golden_dir() + "/";
  const SafetensorsFile f = load_safetensors(dir + "safetensors_sample.safetensors");
  std::ifstream in(dir + "safetensors_sample.json");
  REQUIRE(in.good());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const json::Value want = json::parse(text, "safetensors_sample.json");

  for (const auto& [k, v] : want.find("metadata")->object) REQUIRE(f.metadata.at(k) == v.string);
  REQUIRE(f.metadata.size() == want.find("metadata")->object.size());
  std::vector<std::string> order;
  for (const json::Value& n : want.find("header_order")->array) order.push_back(n.string);
  REQUIRE(f.names() == order);

  for (const auto& [name, e] : want.find("tensors")->object) {
    INFO(name);
    const Tensor t = f.get(name);
    REQUIRE(t.dtype() == dtype_from_safetensors_name(e.find("dtype")->string));
    Shape shape;
    for (const json::Value& d : e.find("shape")->array) shape.push_back(d.integer);
    REQUIRE(t.sizes() == shape);
    const auto& values = e.find("values")->array;
    REQUIRE(static_cast<int64_t>(values.size()) == t.numel());
    if (t.is_floating_point()) {
      const std::vector<double> got = t.to_vector<double>();
      for (size_t i = 0; i < values.size(); ++i) {
        const double w = std::strtod(values[i].string.c_str(), nullptr);
        INFO("element " << i << ": got " << got[i] << ", want " << values[i].string);
        if (std::isnan(w)) {
          REQUIRE(std::isnan(got[i]));
        } else {
          REQUIRE(got[i] == w);
          REQUIRE(std::signbit(got[i]) == std::signbit(w));
        }
      }
    } else if (t.dtype() == DType::boolean) {
      const std::vector<bool> got = t.to_vector<bool>();
      for (size_t i = 0; i < values.size(); ++i) REQUIRE(got[i] == values[i].boolean);
    } else {
      const std::vector<int64_t> got = t.to_vector<int64_t>();
      for (size_t i = 0; i < values.size(); ++i) REQUIRE(got[i] == values[i].integer);
    }
    if (const json::Value* bits = e.find("bits")) {
      const auto* p = static_cast<const uint16_t*>(t.data_ptr());
      for (size_t i = 0; i < bits->array.size(); ++i) REQUIRE(p[i] == bits->array[i].integer);
    }
  }
}

// ---- malformed input ----------------------------------------------------------------------------
TEST_CASE("safetensors rejects malformed files with a helpful IOError", "[tensor][safetensors]") {
  const std::string f32x2(8, '\0');  // two f32 zeros
  auto load = [](const std::string& bytes) { return from_safetensors_bytes(bytes); };
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };

  SECTION("shorter than the length prefix") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(""), IOError, "<memory>", "0 bytes", "shorter");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load("abc"), IOError, "3 bytes", "not a safetensors file");
  }
  SECTION("header length beyond the file or the format's limit") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(with_length(100, "{}      ")), IOError, "<memory>", "header length 100",
                                   "truncated");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(with_length(200'000'000, "{}")), IOError, "limit");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(with_length(~uint64_t{0}, "{}")), IOError, "limit");
  }
  SECTION("invalid JSON") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{\"a\":", "")), IOError, "<memory>", "invalid JSON");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("[1, 2]", "")), IOError, "must be a JSON object", "array");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{'a': 1}", "")), IOError, "invalid JSON", "quoted key");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{} {}", "")), IOError, "character '{' after the end");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{}x", "")), IOError, "after the end of the JSON header");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{}\0\0"s, "")), IOError, "byte 0x00");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{\"a\x01\":1}", "")), IOError, "control character");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{\"\xC0\xAF\":1}", "")), IOError, "UTF-8");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{\"\\ud800\":1}", "")), IOError, "surrogate");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{\"\\q\":1}", "")), IOError, "invalid escape");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{\"a\":01}", "")), IOError, "leading zeros");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file(std::string(100000, '[') + std::string(100000, ']'), "")), IOError,
                                   "nesting");
  }
  SECTION("unknown or missing dtype") {
    const std::string u64 = "{" + entry("w", "U64", "[2]", "[0,16]") + "}";
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file(u64, std::string(16, 'a'))), IOError, "'w'",
                                   "unsupported dtype \"U64\"", "F32");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", f32x2)), IOError,
                                   "'w'", "dtype");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{\"w\":[1]}", "")), IOError, "'w'", "expected an object");
  }
  SECTION("shape and offsets disagree") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("w", "F32", "[3]", "[0,8]") + "}", f32x2)), IOError,
                                   "'w'", "[3]", "needs 12 bytes", "span 8");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("w", "F32", "[2]", "[8,0]") + "}", f32x2)), IOError,
                                   "end before they begin");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("w", "F32", "[2]", "[0,8,16]") + "}", f32x2)), IOError,
                                   "[begin, end]");
  }
  SECTION("offsets outside the buffer") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("w", "F32", "[4]", "[0,16]") + "}", f32x2)), IOError,
                                   "'w'", "past the end", "8 bytes");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("e", "F32", "[0]", "[99,99]") + "}", "")), IOError,
                                   "'e'", "past the end");
  }
  SECTION("overlap, gaps and uncovered bytes") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(
        load(make_file("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[1]", "[4,8]") + "}", f32x2)),
        IOError, "'a'", "'b'", "overlap");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("a", "F32", "[1]", "[4,8]") + "}", f32x2)), IOError,
                                   "gap", "'a'");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("a", "F32", "[1]", "[0,4]") + "}", f32x2)), IOError,
                                   "4 bytes after the last tensor");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{}", "junk")), IOError, "4 bytes after");
  }
  SECTION("negative, fractional, boolean and overflowing sizes") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("w", "F32", "[-2]", "[0,8]") + "}", f32x2)), IOError,
                                   "'w'", "shape must hold non-negative integers", "-2");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("w", "F32", "[2.0]", "[0,8]") + "}", f32x2)), IOError,
                                   "non-negative integers", "2.0");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("w", "F32", "[2]", "[0,8e0]") + "}", f32x2)), IOError,
                                   "data_offsets must hold non-negative integers");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("w", "F32", "[true]", "[0,8]") + "}", f32x2)), IOError,
                                   "found true");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("w", "F32", "[\"2\"]", "[0,8]") + "}", f32x2)), IOError,
                                   "found string");
    PRECIS_REQUIRE_THROWS_WITH_ALL(
        load(make_file("{" + entry("w", "F32", "[4294967296,4294967296,0]", "[0,0]") + "}", "")), IOError,
        "more elements than fit in 64 bits");
    PRECIS_REQUIRE_THROWS_WITH_ALL(
        load(make_file("{" + entry("w", "F64", "[2305843009213693952,16]", "[0,8]") + "}", f32x2)), IOError,
        "more elements than fit");
    PRECIS_REQUIRE_THROWS_WITH_ALL(
        load(make_file("{" + entry("w", "F64", "[4611686018427387904]", "[0,8]") + "}", f32x2)), IOError,
        "needs more than 9223372036854775807 bytes");
    PRECIS_REQUIRE_THROWS_WITH_ALL(
        load(make_file("{" + entry("w", "F32", "[2]", "[0,99999999999999999999]") + "}", f32x2)), IOError,
        "data_offsets holds 99999999999999999999, larger than the largest size");
    // Non-negative but past int64 (issue 13: was reported as "must hold non-negative integers").
    PRECIS_REQUIRE_THROWS_WITH_ALL(
        load(make_file("{" + entry("w", "F32", "[18446744073709551608]", "[0,8]") + "}", f32x2)), IOError,
        "shape holds 18446744073709551608, larger than the largest size precis reads (9223372036854775807)");
  }
  SECTION("duplicate names") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(
        load(make_file("{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("a", "F32", "[1]", "[4,8]") + "}", f32x2)),
        IOError, "duplicate key \"a\"");
  }
  SECTION("bad metadata") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{\"__metadata__\":{\"step\":3}}", "")), IOError, "'step'",
                                   "must be a string");
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{\"__metadata__\":[]}", "")), IOError, "__metadata__");
  }
  SECTION("BOOL bytes other than 0 and 1") {
    PRECIS_REQUIRE_THROWS_WITH_ALL(load(make_file("{" + entry("m", "BOOL", "[3]", "[0,3]") + "}", "\x01\x00\x02"s)),
                                   IOError, "'m'", "element 2", "not 0 or 1");
  }
}

TEST_CASE("safetensors accepts what the format allows", "[tensor][safetensors]") {
  // Escapes (incl. a surrogate pair), whitespace, unknown extra fields, data in any order.
  const std::string header =
      "{ \"caf\\u00e9 \\ud83d\\ude00\\n\" : {\"dtype\":\"I32\", \"shape\":[ 1 ], \"data_offsets\":[4, 8], "
      "\"extra\": [null, true, 1.5e3, {}]},\n \"a\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}";
  std::string data(8, '\0');
  data[0] = 5;
  data[4] = 7;
  const SafetensorsFile f = from_safetensors_bytes(make_file(header, data, false));
  REQUIRE(f.names() == std::vector<std::string>{"caf\xC3\xA9 \xF0\x9F\x98\x80\n", "a"});
  REQUIRE(f.get("a").item<int64_t>() == 5);
  REQUIRE(f.tensors[0].second.to_vector<int32_t>() == std::vector<int32_t>{7});
}

TEST_CASE("safetensors reads U8, I8, U16, I16 as i32 and U32 as i64, every value exact", "[tensor][safetensors]") {
  // PyTorch checkpoints carry uint8 masks and buffers; one made the whole file unloadable.
  const std::string header =
      "{\"u8\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
      "\"i8\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[2,4]},"
      "\"u16\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[4,6]},"
      "\"i16\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[6,8]},"
      "\"u32\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
  const std::string data = {'\xff', '\x07', '\x80', '\x7f', '\xfe', '\xff', '\x00', '\x80',
                            '\xff', '\xff', '\xff', '\xff'};
  const SafetensorsFile f = from_safetensors_bytes(make_file(header, data));
  CHECK(f.get("u8").dtype() == DType::i32);
  CHECK(f.get("u8").to_vector<int32_t>() == std::vector<int32_t>{255, 7});
  CHECK(f.get("i8").to_vector<int32_t>() == std::vector<int32_t>{-128, 127});
  CHECK(f.get("u16").to_vector<int32_t>() == std::vector<int32_t>{65534});
  CHECK(f.get("i16").to_vector<int32_t>() == std::vector<int32_t>{-32768});
  CHECK(f.get("u32").dtype() == DType::i64);
  CHECK(f.get("u32").to_vector<int64_t>() == std::vector<int64_t>{4294967295});
  // A size that does not match the stored width is still refused.
  CHECK_THROWS_AS(from_safetensors_bytes(make_file("{\"w\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[0,2]}}",
                                                   std::string(2, '\0'))),
                  IOError);
}

TEST_CASE("safetensors rejects every truncation of a valid file", "[tensor][safetensors]") {
  const std::string bytes = to_safetensors_bytes(
      {{"a", arange(3.0)}, {"b", scalar_tensor(true)}, {"c", zeros({2, 2}, {.dtype = DType::bf16})}}, {{"m", "x"}});
  REQUIRE_NOTHROW(from_safetensors_bytes(bytes));
  for (size_t len = 0; len < bytes.size(); ++len) {
    INFO("prefix of " << len << " of " << bytes.size() << " bytes");
    REQUIRE_THROWS_AS(from_safetensors_bytes(std::string_view(bytes).substr(0, len)), IOError);
  }
}

TEST_CASE("safetensors survives random corruption: IOError or a consistent load", "[tensor][safetensors]") {
  const std::string good = to_safetensors_bytes({{"w", arange(6.0).view({2, 3})},
                                                 {"mask", from_vector<bool>({true, false})},
                                                 {"idx", from_vector<int64_t>({1, 2, 3})}},
                                                {{"epoch", "3"}});
  uint64_t header_end = 0;
  for (int i = 0; i < 8; ++i) header_end |= static_cast<uint64_t>(static_cast<unsigned char>(good[i])) << (8 * i);
  header_end += 8;
  std::mt19937 rng(1234);
  int loaded = 0, rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      // Mostly the header (where structure lives), sometimes anywhere.
      const size_t at = trial % 4 == 0 ? rng() % bad.size() : rng() % header_end;
      bad[at] = static_cast<char>(trial % 2 ? bad[at] ^ (1 << (rng() % 8)) : rng() % 256);
    }
    INFO("trial " << trial);
    try {
      const SafetensorsFile f = from_safetensors_bytes(bad);
      ++loaded;
      size_t total = 0;
      for (const auto& [name, t] : f.tensors) {
        REQUIRE(t.is_contiguous());
        total += static_cast<size_t>(t.numel()) * t.element_size();
      }
      REQUIRE(total <= bad.size());
    } catch (const IOError&) {
      ++rejected;
    }
  }
  INFO(loaded << " loaded, " << rejected << " rejected");
  REQUIRE(rejected > 0);
  REQUIRE(loaded > 0);  // flips in the data and in header padding leave a valid file
}
