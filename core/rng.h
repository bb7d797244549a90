#pragma once
// Counter-based random numbers (Philox4x32-10). A draw is a pure function of (seed, counter), so
// the CPU and CUDA kernels produce the same numbers for the same seed and offset, and a generator's
// whole state is two integers (easy to checkpoint).
#include <array>
#include <cstdint>

namespace precis {

/// Philox4x32 with 10 rounds: four 32-bit outputs for one 128-bit counter and a 64-bit key.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, uint64_t key);

/// Uniform float in [0, 1) from 32 random bits (24 significant bits).
inline float uint32_to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

class Generator;

/// Where a kernel's random numbers start: block `offset` of the Philox stream `seed`, plus, for a
/// kernel captured in a CUDA graph, the value at `offset_base` when the kernel runs — device memory
/// the graph rewrites before each replay (core/cuda_graph.h), so that every replay draws new
/// numbers. `offset_base` is null outside a capture; a kernel adds it once at entry.
struct PhiloxDraw {
  uint64_t seed = 0;                      ///< the Philox key
  uint64_t offset = 0;                    ///< the first block (relative to *offset_base when set)
  const uint64_t* offset_base = nullptr;  ///< device memory added to offset when the kernel runs
};

/// Sees every draw from any Generator on the thread it is installed on, before the draw moves the
/// generator's offset. Activation checkpointing (autograd/checkpoint.h) installs one around a
/// region's forward to learn which generators the region drew from and where each stood, so that
/// the recomputation draws the same numbers (dropout masks) from the same generators.
class DrawObserver {
 public:
  virtual ~DrawObserver() = default;
  /// Called by Generator::reserve on the observed thread, with the generator about to draw.
  virtual void on_draw(Generator& generator) = 0;
};

namespace detail {
// Constant-initialised, so reserve() pays one thread-local load when nothing observes.
inline thread_local DrawObserver* t_draw_observer = nullptr;
}  // namespace detail

/// Installs `observer` on this thread (nullptr: none) and returns the previous one; an observer
/// that nests (checkpoints do) passes each draw on to the one it replaced.
DrawObserver* set_draw_observer(DrawObserver* observer);

/// Answers Generator::draw on the thread it is installed on: cuda::Graph installs one while it
/// captures, giving each draw an offset relative to a device-side base instead of the host offset.
class CapturedDraws {
 public:
  virtual ~CapturedDraws() = default;
  /// The draw of n_blocks from `generator` inside the capture.
  virtual PhiloxDraw draw(Generator& generator, uint64_t n_blocks) = 0;
};

namespace detail {
inline thread_local CapturedDraws* t_captured_draws = nullptr;
}  // namespace detail

/// A seeded stream of Philox blocks. `offset` counts 128-bit blocks already consumed; kernels
/// reserve a range of blocks with `reserve(n)` and generate them in parallel from (seed, start).
/// Not thread-safe: threads that draw from one generator (the default one included) must
/// serialise their reserve() calls.
class Generator {
 public:
  /// A stream at offset 0 (the default seed is a fixed constant, not PyTorch's).
  explicit Generator(uint64_t seed = 0x853c49e6748fea9bULL) : seed_(seed) {}
  uint64_t seed() const { return seed_; }  ///< the Philox key
  uint64_t offset() const { return offset_; }  ///< blocks consumed so far
  /// Restores a (seed, offset) pair read from seed() and offset(): the draws continue exactly.
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }
  /// Reseeds and restarts the stream at offset 0 (Generator.manual_seed).
  void manual_seed(uint64_t seed) { seed_ = seed; offset_ = 0; }
  /// Reserves n blocks and returns the offset of the first.
  uint64_t reserve(uint64_t n_blocks) {
    if (DrawObserver* o = detail::t_draw_observer) [[unlikely]]
      o->on_draw(*this);
    uint64_t start = offset_;
    offset_ += n_blocks;
    return start;
  }
  /// A kernel's draw of n blocks: (seed, reserve(n)), or inside a CUDA graph capture on this
  /// thread what the capture answers (a position relative to the graph's device-side base).
  /// Kernels that can run on a device take their numbers through this.
  PhiloxDraw draw(uint64_t n_blocks) {
    if (CapturedDraws* c = detail::t_captured_draws) [[unlikely]]
      return c->draw(*this, n_blocks);
    const uint64_t start = reserve(n_blocks);
    return {seed_, start, nullptr};
  }
  /// The four outputs of block `index` of this stream.
  std::array<uint32_t, 4> block(uint64_t index) const {
    return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u}, seed_);
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// The process-wide default generator used by rand/randn/dropout when none is given.
Generator& default_generator();
/// Seeds the default generator (and resets its offset), like torch.manual_seed.
void manual_seed(uint64_t seed);

}  // namespace precis
