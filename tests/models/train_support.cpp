#include "tests/models/train_support.h"
#include "tests/support/paths.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

namespace precis::train_testing {

#ifdef PRECIS_HAS_TRAIN_EXE
Run run_cli(const std::string& args) {
  const std::string exe = testing::train_exe();
  Run r;
  FILE* p = ::popen((exe + " " + args + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
#endif

TempDir::TempDir(const std::string& tag) {
  static int counter = 0;
  path = fs::temp_directory_path() /
         ("precis-train-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(path);
  fs::create_directories(path);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path, ec);
}

namespace {

void put_u32(std::ofstream& out, uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  out.write(reinterpret_cast<const char*>(b), 4);
}

// n 8×8 images whose class is a bright row (row = label % 8, plus a column for labels >= 8) on
// noise.
void write_images(const std::string& dir, const std::string& prefix, int n, uint32_t seed) {
  std::ofstream images(dir + "/" + prefix + "-images-idx3-ubyte", std::ios::binary);
  std::ofstream labels(dir + "/" + prefix + "-labels-idx1-ubyte", std::ios::binary);
  put_u32(images, 0x803);
  put_u32(images, static_cast<uint32_t>(n));
  put_u32(images, 8);
  put_u32(images, 8);
  put_u32(labels, 0x801);
  put_u32(labels, static_cast<uint32_t>(n));
  uint32_t s = seed;
  auto next = [&s] { return s = s * 1664525u + 1013904223u; };
  for (int i = 0; i < n; ++i) {
    const int label = static_cast<int>(next() >> 8) % 10;
    labels.put(static_cast<char>(label));
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x) {
        int v = static_cast<int>((next() >> 24) % 64);
        if (y == label % 8 || (label >= 8 && x == label - 6)) v += 180;
        images.put(static_cast<char>(v));
      }
  }
}

}  // namespace

std::string image_data(const TempDir& dir) {
  const std::string d = dir / "images";
  fs::create_directories(d);
  write_images(d, "train", 96, 7);
  write_images(d, "t10k", 40, 11);
  return d;
}

std::string text_data(const TempDir& dir) {
  const std::string path = dir / "corpus.txt";
  std::ofstream out(path);
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "big", "red", "house",
                         "small", "bird", "sang", "in", "tree", "green", "field", "under", "blue", "sky"};
  uint32_t s = 3;
  for (int line = 0; line < 240; ++line) {
    const int len = 4 + static_cast<int>((s = s * 1664525u + 1013904223u) >> 28);
    for (int w = 0; w < len; ++w) out << (w ? " " : "") << words[((s = s * 1664525u + 1013904223u) >> 16) % 22];
    out << ".\n";
  }
  return path;
}

namespace {

// What every tiny test run shares: two epochs on one thread, quiet, checkpoints kept.
train::TrainOptions tiny_run(const std::string& data, const std::string& ckpt) {
  train::TrainOptions o;
  o.data = data;
  o.epochs = 2;
  o.threads = 1;
  o.checkpoint_dir = ckpt;
  o.keep = 100;
  o.quiet = true;
  return o;
}

}  // namespace

train::TrainOptions tiny_resnet(const std::string& data, const std::string& ckpt) {
  train::TrainOptions o = tiny_run(data, ckpt);
  o.task = train::Task::resnet;
  o.model = "resnet20";
  o.width = 4;
  o.batch = 16;  // 6 steps per epoch
  o.lr = 0.05;
  o.schedule = train::Schedule::onecycle;
  o.workers = 1;
  o.eval_batch = 20;
  return o;
}

train::TrainOptions tiny_bert(const std::string& data, const std::string& ckpt, const std::string& vocab) {
  train::TrainOptions o = tiny_run(data, ckpt);
  o.task = train::Task::bert_mini;
  o.model = "bert-mini";
  o.vocab = vocab;
  o.vocab_size = 60;
  o.hidden = 32, o.layers = 1, o.heads = 2, o.intermediate = 64;
  o.max_len = 16;
  o.batch = 32;  // 228 training lines: 8 steps per epoch
  o.optimizer = train::OptimizerKind::adamw;
  o.lr = 2e-3;
  o.weight_decay = 0.01;
  o.clip = 1.0;
  o.schedule = train::Schedule::warmup_linear;
  o.workers = 2;
  o.eval_batch = 16;
  return o;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
}

std::string state_difference(const std::string& a_path, const std::string& b_path) {
  const train::Checkpoint a = train::load_checkpoint(a_path);
  const train::Checkpoint b = train::load_checkpoint(b_path);
  for (const auto& [name, t] : a.state) {
    auto it = b.state.find(name);
    if (it == b.state.end()) return name + " is missing from " + b_path;
    if (!same_bits(t, it->second)) return name + " differs";
  }
  if (a.state.size() != b.state.size()) return b_path + " has more tensors";
  return "";
}

void require_same_state(const std::string& a_path, const std::string& b_path) {
  train::Checkpoint a = train::load_checkpoint(a_path);
  train::Checkpoint b = train::load_checkpoint(b_path);
  REQUIRE(a.state.size() == b.state.size());
  int64_t models = 0;
  for (const auto& [name, t] : a.state) {
    INFO(name << " in " << a_path << " and " << b_path);
    REQUIRE(b.state.count(name) == 1);
    REQUIRE(same_bits(t, b.state.at(name)));
    models += name.rfind("model.", 0) == 0;
  }
  REQUIRE(models > 10);
}

bool every_weight_changed(const std::string& a_path, const std::string& b_path) {
  const train::Checkpoint a = train::load_checkpoint(a_path);
  const train::Checkpoint b = train::load_checkpoint(b_path);
  int64_t changed = 0, weights = 0;
  for (const auto& [name, t] : b.state)
    if (name.rfind("model.", 0) == 0 && name.find("weight") != std::string::npos) {
      ++weights;
      changed += !same_bits(t, a.state.at(name));
    }
  return weights > 0 && changed == weights;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

namespace {

constexpr std::array<uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  // The message, a 1 bit, zeros to 56 mod 64 bytes, and the bit length as a big-endian u64.
  std::string m = bytes;
  m.push_back(static_cast<char>(0x80));
  while (m.size() % 64 != 56) m.push_back('\0');
  const uint64_t bits = static_cast<uint64_t>(bytes.size()) * 8;
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  for (size_t block = 0; block < m.size(); block += 64) {
    std::array<uint32_t, 64> w{};
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 4; ++j) w[i] = (w[i] << 8) | static_cast<unsigned char>(m[block + 4 * i + j]);
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
  }
  char hex[65];
  for (int i = 0; i < 8; ++i) std::snprintf(hex + 8 * i, 9, "%08x", h[i]);
  return std::string(hex, 64);
}

}  // namespace precis::train_testing
