// Writes the seed corpora under <out>/<harness>/ (usage: precis_fuzz_seeds <out>): small valid
// inputs of every format, built with the library's own writers where it has one, so that the
// fuzzers start from files the readers accept. scripts/fuzz.sh --seeds runs it into fuzz/corpus.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz/training_state.h"
#include "models/train/checkpoint.h"
#include "tensor/factory.h"
#include "tensor/safetensors.h"

namespace fs = std::filesystem;
using namespace precis;

namespace {

std::string out_dir;

void put(const std::string& harness, const std::string& name, const std::string& bytes) {
  fs::create_directories(out_dir + "/" + harness);
  std::ofstream f(out_dir + "/" + harness + "/" + name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::perror(name.c_str());
    std::exit(1);
  }
}

std::string gzip(const std::string& in) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, in.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string idx(uint8_t type, const std::vector<uint32_t>& dims, size_t elem_bytes) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>(d >> shift));
    n *= d;
  }
  for (size_t i = 0; i < n * elem_bytes; ++i) s.push_back(static_cast<char>(i * 37 % 251));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];

  put("fuzz_json", "header.json",
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})");
  put("fuzz_json", "values.json", R"([null, true, false, -0.5e+3, 12, "a\u00e9\ud83d\ude00\n", {"k": []}])");
  put("fuzz_json", "nested.json", R"([[[[{"a":[{"b":1}]}]]]])");

  NamedTensors mixed = {{"f32", arange(6.0).view({2, 3})},
                        {"f64", full({2}, 1.5, {.dtype = DType::f64})},
                        {"f16", ones({3}, {.dtype = DType::f16})},
                        {"bf16", ones({1, 2}, {.dtype = DType::bf16})},
                        {"i64", arange(4.0, {.dtype = DType::i64})},
                        {"i32", zeros({2, 2}, {.dtype = DType::i32})},
                        {"bool", ones({3}, {.dtype = DType::boolean})},
                        {"scalar", scalar_tensor(2.0)},
                        {"empty", zeros({0, 4})}};
  put("fuzz_safetensors", "mixed.safetensors", to_safetensors_bytes(mixed, {{"format", "pt"}}));
  StateDict state = fuzz::make_training_state();
  std::string state_bytes = to_safetensors_bytes(NamedTensors(state.begin(), state.end()));
  put("fuzz_safetensors", "training_state.safetensors", state_bytes);
  put("fuzz_state_dict", "training_state.safetensors", state_bytes);
  put("fuzz_state_dict", "mixed.safetensors", to_safetensors_bytes(mixed));

  fs::path tmp = fs::temp_directory_path() / "precis-fuzz-seeds";
  fs::remove_all(tmp);
  std::string ckpt = train::save_checkpoint(tmp.string(), 1, state, {{"model", "fuzz"}});
  std::ifstream in(ckpt, std::ios::binary);
  put("fuzz_checkpoint", "step-000000001.safetensors", std::string(std::istreambuf_iterator<char>(in), {}));
  fs::remove_all(tmp);

  std::string images = idx(0x08, {3, 4, 5}, 1), labels = idx(0x08, {3}, 1);
  put("fuzz_idx", "images-idx3-ubyte", images);
  put("fuzz_idx", "labels-idx1-ubyte", labels);
  put("fuzz_idx", "f32-idx2", idx(0x0D, {2, 3}, 4));
  put("fuzz_idx", "i16-idx1", idx(0x0B, {5}, 2));
  put("fuzz_idx", "f64-idx1", idx(0x0E, {2}, 8));
  put("fuzz_idx", "images-idx3-ubyte.gz", gzip(images));
  put("fuzz_idx", "labels-idx1-ubyte.gz", gzip(labels));
  put("fuzz_idx_gzip", "images-idx3-ubyte", images);
  put("fuzz_idx_gzip", "labels-idx1-ubyte", labels);
  put("fuzz_idx_gzip", "i32-idx2", idx(0x0C, {2, 2}, 4));

  std::string cifar;
  for (int r = 0; r < 2; ++r) {
    cifar.push_back(static_cast<char>(r * 7));
    for (int i = 0; i < 3072; ++i) cifar.push_back(static_cast<char>((i + r) % 256));
  }
  put("fuzz_cifar", "data_batch.bin", cifar);
  put("fuzz_cifar", "data_batch.bin.gz", gzip(cifar));

  put("fuzz_vocab", "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n##llo\nhe\n,\n!\nworld\n##s\nun\n##aff\n##able\n");
  put("fuzz_vocab", "vocab_crlf.txt", "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\n\xc3\xa9\r\n\xe4\xbd\xa0\r\n");
  put("fuzz_vocab", "vocab.txt.gz", gzip("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n##b\n"));

  put("fuzz_wordpiece", "plain", "\x09Hello, world! unaffable running\xffthe a b c?");
  put("fuzz_wordpiece", "unicode", "\xff" "H\xc3\xa9llo \xe4\xbd\xa0\xe5\xa5\xbd [MASK] caf\x65\xcc\x81 \xf0\x9f\x98\x80\x01\x7f\xff[SEP]x");
  put("fuzz_wordpiece", "long", std::string("\x81") + std::string(150, 'a') + " ##a [CLS][CLS]");

  put("fuzz_corpus", "lines.txt", "first line\r\nsecond line\n\n   \nthird\n");
  put("fuzz_corpus", "data.noun",
      "  1 This software and database is being provided\n"
      "00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived to have its own distinct existence\n"
      "00001930 03 n 01 physical_entity 0 | an entity that has physical existence  \n");
  put("fuzz_corpus", "lines.txt.gz", gzip("one\ntwo\nthree\n"));

  // fuzz_ops decodes bytes into op calls (fuzz_ops.cpp); a few patterns start it on each op.
  for (int op = 0; op < 24; ++op) {
    std::string s;
    for (int i = 0; i < 48; ++i) s.push_back(static_cast<char>(i == 0 ? op : (op * 31 + i * 7) % 256));
    put("fuzz_ops", "op" + std::to_string(op), s);
  }
  std::printf("seed corpora written under %s\n", out_dir.c_str());
  return 0;
}
