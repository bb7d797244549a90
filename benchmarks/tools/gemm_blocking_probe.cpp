// gemm_blocking_probe: oneDNN's matmul primitive on a whole GEMM against the same GEMM in K blocks
// (the first block writes, each later one adds through the sum post-op; bf16 blocks accumulate in
// an fp32 buffer that is rounded to bf16 once at the end), as ops/cpu/gemm_onednn.cpp runs it.
// Shapes: BERT-mini's vocabulary gradients and a few around the rule's edges; each line says
// whether the rule in gemm_onednn.cpp (k_block_depth) takes the blocks for that shape.
// Prints the median ms per call of `reps`, whole and blocked, alternated per repetition.
// Build: g++ -O2 -std=c++20 -fopenmp benchmarks/tools/gemm_blocking_probe.cpp -ldnnl -o gemm_blocking_probe
// Run:   OMP_NUM_THREADS=2 ./gemm_blocking_probe [f32|bf16] [reps]
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

using namespace dnnl;
using dt = memory::data_type;

namespace {

struct Shape {
  int64_t m, k, n;
  bool a_col_major;
  const char* label;
};

// The same rule as gemm_onednn.cpp's k_block_depth (kept in step by hand: this tool links no
// precis code so that it times oneDNN alone).
bool rule_blocks(const Shape& s) { return s.k >= 24576 && s.m >= 1024 && s.n <= 1024; }
int64_t depth_of(const Shape& s, bool bf16) {
  const int64_t target = bf16 ? 4096 : 8192, count = (s.k + target - 1) / target;
  return ((s.k + count - 1) / count + 63) / 64 * 64;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const bool bf16 = !(argc > 1 && std::string(argv[1]) == "f32");
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  const dt in = bf16 ? dt::bf16 : dt::f32;
  const size_t es = bf16 ? 2 : 4;
  engine eng(engine::kind::cpu, 0);
  stream str(eng);
  const Shape shapes[] = {
      {2048, 30522, 256, false, "BERT vocab input grad g·W"},
      {1024, 32768, 1024, false, "square-ish long K"},
      {2048, 16384, 512, false, "K 16384, 512 columns"},
      {2048, 16384, 256, false, "K 16384, 256 columns"},
      {256, 32768, 256, false, "long K, few rows"},
      {2048, 8192, 256, false, "K 8192"},
      {4096, 8192, 4096, false, "large, K 8192"},
  };
  std::printf("%s, %d reps, median ms per call\n", bf16 ? "bf16" : "f32", reps);
  std::printf("| shape (m x k x n) | what | rule | depth | whole ms | K blocks ms | blocks / whole |\n|---|---|---|---:|---:|---:|---:|\n");
  for (const Shape& s : shapes) {
    const bool rule = rule_blocks(s);
    const int64_t depth = depth_of(s, bf16);
    std::vector<uint8_t> a(s.m * s.k * es), b(s.k * s.n * es), c(s.m * s.n * es), acc(s.m * s.n * 4);
    for (size_t i = 0; i + 1 < a.size(); i += 2) { const uint16_t v = 0x3f00 + (i / 2) % 97; std::memcpy(&a[i], &v, 2); }
    for (size_t i = 0; i + 1 < b.size(); i += 2) { const uint16_t v = 0x3e80 + (i / 2) % 89; std::memcpy(&b[i], &v, 2); }
    auto a_desc = [&](int64_t kk) {
      return s.a_col_major ? memory::desc({s.m, kk}, in, {1, s.m}) : memory::desc({s.m, kk}, in, {s.k, 1});
    };
    const memory::desc whole_a = a_desc(s.k), whole_b({s.k, s.n}, in, {s.n, 1}), whole_c({s.m, s.n}, in, {s.n, 1});
    const matmul whole(matmul::primitive_desc(matmul::desc(whole_a, whole_b, whole_c), eng));
    // Blocks: depth d (the last shorter); c in fp32 for bf16.
    const dt c_dt = bf16 ? dt::f32 : dt::f32;
    void* c_target = bf16 ? static_cast<void*>(acc.data()) : static_cast<void*>(c.data());
    struct Block { matmul p; memory::desc ad, bd, cd; int64_t begin; };
    std::vector<Block> blocks;
    for (int64_t begin = 0; begin < s.k; begin += depth) {
      const int64_t kk = std::min(depth, s.k - begin);
      primitive_attr attr;
      if (begin > 0) { post_ops po; po.append_sum(1.0f); attr.set_post_ops(po); }
      const memory::desc ad = a_desc(kk), bd({kk, s.n}, in, {s.n, 1}), cd({s.m, s.n}, c_dt, {s.n, 1});
      blocks.push_back({matmul(matmul::primitive_desc(matmul::desc(ad, bd, cd), attr, eng)), ad, bd, cd, begin});
    }
    auto run_whole = [&] {
      whole.execute(str, {{DNNL_ARG_SRC, memory(whole_a, eng, a.data())}, {DNNL_ARG_WEIGHTS, memory(whole_b, eng, b.data())},
                          {DNNL_ARG_DST, memory(whole_c, eng, c.data())}});
      str.wait();
    };
    auto run_blocks = [&] {
      for (const Block& blk : blocks) {
        uint8_t* ap = a.data() + (s.a_col_major ? blk.begin * s.m : blk.begin) * es;
        blk.p.execute(str, {{DNNL_ARG_SRC, memory(blk.ad, eng, ap)},
                            {DNNL_ARG_WEIGHTS, memory(blk.bd, eng, b.data() + blk.begin * s.n * es)},
                            {DNNL_ARG_DST, memory(blk.cd, eng, c_target)}});
      }
      str.wait();
      if (bf16) {  // the fp32 buffer rounded to bf16 once (round to nearest even)
        const float* f = reinterpret_cast<const float*>(acc.data());
        uint16_t* o = reinterpret_cast<uint16_t*>(c.data());
        for (int64_t i = 0; i < s.m * s.n; ++i) {
          uint32_t u;
          std::memcpy(&u, &f[i], 4);
          o[i] = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
        }
      }
    };
    run_whole();
    run_blocks();
    std::vector<double> tw, tb;
    for (int r = 0; r < reps; ++r) {
      double t = now_ms();
      run_whole();
      tw.push_back(now_ms() - t);
      t = now_ms();
      run_blocks();
      tb.push_back(now_ms() - t);
    }
    const double w = median(tw), bl = median(tb);
    std::printf("| %ldx%ldx%ld | %s | %s | %ld | %.2f | %.2f | %.2f |\n", (long)s.m, (long)s.k, (long)s.n, s.label,
                rule ? "blocks" : "whole", (long)depth, w, bl, bl / w);
  }
}
