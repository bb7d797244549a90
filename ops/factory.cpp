// The factory functions declared in tensor/factory.h. They are ops, as in PyTorch: filling,
// converting and moving the new values to a device runs kernels, which the tensor layer may not.
#include "tensor/factory.h"

#include <cmath>
#include <numbers>
#include <optional>

#include "core/checked_math.h"
#include "core/cuda_graph.h"
#include "core/grad_mode.h"
#include "core/thread_pool.h"
#include "ops/detail/scalar_check.h"

namespace precis {

Tensor empty(const Shape& sizes, TensorOptions options) {
  Tensor t = detail::new_contiguous(sizes, options.dtype, options.device, "empty");
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor full(const Shape& sizes, Scalar value, TensorOptions options) {
  check_scalar_fits("full", "fill value", value, options.dtype,
                    detail::str_cat("a tensor of shape ", shape_str(sizes), ", dtype ", dtype_name(options.dtype),
                                    ", device ", options.device.str()));
  const bool rg = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(sizes, options);
  t.fill_(value);
  // A new tensor starts at version 0 (as in PyTorch); the fill that made it is not a modification.
  t.impl()->version_counter()->value.store(0, std::memory_order_relaxed);
  if (rg) t.requires_grad_(true);
  return t;
}

Tensor zeros(const Shape& sizes, TensorOptions options) { return full(sizes, 0.0, options); }
Tensor ones(const Shape& sizes, TensorOptions options) { return full(sizes, 1.0, options); }

static TensorOptions options_of(const Tensor& t) { return {.dtype = t.dtype(), .device = t.device()}; }
Tensor empty_like(const Tensor& t) { return empty(t.sizes(), options_of(t)); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), options_of(t)); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), options_of(t)); }
Tensor full_like(const Tensor& t, Scalar value) { return full(t.sizes(), value, options_of(t)); }

Tensor scalar_tensor(Scalar value, TensorOptions options) { return full({}, value, options); }

Tensor upload(const Tensor& t, Device device) {
  if (t.device() == device || !t.device().is_cpu() || !pinned_memory_available()) return t.to(device);
  // A capture would record a copy from a pinned buffer that is freed (and reused) right after it:
  // every replay would copy whatever that memory holds then. (A pageable source is refused as a
  // host wait.)
  PRECIS_CHECK_T(GraphCaptureError, !cuda::is_capturing(), "a host tensor ", t.describe(), " copied to ",
                 device.str(), " (a factory such as arange or from_vector with a device) while capturing a CUDA "
                 "graph: the replays would copy from a temporary host buffer that is gone by then. Create the "
                 "tensor before the capture, as a module buffer or a static input refilled with copy_");
  return t.pin_memory().to(device, /*non_blocking=*/true);
}

Tensor arange(double end, TensorOptions options) { return arange(0.0, end, 1.0, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  PRECIS_CHECK(step != 0.0, "arange: step must be non-zero");
  PRECIS_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
               "arange: start, end and step must be finite, got ", start, ", ", end, ", ", step);
  const double span = std::ceil((end - start) / step);
  // 2^62 elements: far beyond any memory, and small enough that the cast below is defined
  // (converting a double of 2^63 or more to int64 is undefined; end - start may even be inf).
  PRECIS_CHECK(!(span > 0x1p62), "arange: [", start, ", ", end, ") in steps of ", step, " has ", span,
               " elements, more than any tensor can hold");
  const int64_t n = span > 0 ? static_cast<int64_t>(span) : 0;
  // Built in place (not through a std::vector) so a length no memory can hold raises
  // OutOfMemoryError naming the request instead of a bare std::bad_alloc.
  Tensor v = empty({n}, {.dtype = DType::f64});
  double* p = v.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = start + static_cast<double>(i) * step;
  const bool rg = options.requires_grad;
  Tensor t = upload(v.to(options.dtype), options.device);
  if (rg) t.requires_grad_(true);
  return t;
}

// ---- random ----------------------------------------------------------------------------------
// Values are generated on the CPU in f64 from Philox blocks and converted; block i of the
// reserved range gives elements 4i..4i+3 (rand) or 2 pairs for Box–Muller (randn), so the values
// do not depend on the thread count.
namespace {

double unit_double(uint32_t hi, uint32_t lo) {
  // 53 random bits in [0, 1).
  const uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((1ULL << 53) - 1)) * (1.0 / 9007199254740992.0);
}

template <typename Fill>
Tensor generate(const Shape& sizes, TensorOptions options, Generator* gen, int64_t per_block, Fill fill) {
  Generator& g = gen ? *gen : default_generator();
  // Allocate first: a request that fails must not advance the generator.
  Tensor v = empty(sizes, {.dtype = DType::f64});
  const int64_t n = v.numel();
  const int64_t blocks = ceil_div(n, per_block);
  const uint64_t start = g.reserve(static_cast<uint64_t>(blocks));
  double* out = v.data_ptr<double>();
  parallel_for(0, blocks, 1024, [&](int64_t b0, int64_t b1) {
    double tmp[4] = {};
    for (int64_t b = b0; b < b1; ++b) {
      fill(g.block(start + static_cast<uint64_t>(b)), tmp);
      const int64_t base = b * per_block;
      for (int64_t j = 0; j < per_block && base + j < n; ++j) out[base + j] = tmp[j];
    }
  });
  const bool rg = options.requires_grad;
  options.requires_grad = false;
  Tensor t = upload(v.to(options.dtype), options.device);
  if (rg) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor rand(const Shape& sizes, TensorOptions options, Generator* gen) {
  PRECIS_CHECK_DTYPE(is_floating(options.dtype), "rand: dtype must be floating, got ", dtype_name(options.dtype));
  // Round down to the dtype's significand width before converting: rounding a 53-bit draw to
  // nearest would turn values just below 1 into exactly 1 (for bf16 about 1 draw in 512).
  const int digits = options.dtype == DType::f64 ? 53 : options.dtype == DType::f32 ? 24
                     : options.dtype == DType::f16 ? 11 : 8;
  const double scale = std::ldexp(1.0, digits);
  return generate(sizes, options, gen, 2, [scale](std::array<uint32_t, 4> r, double* o) {
    o[0] = std::floor(unit_double(r[0], r[1]) * scale) / scale;
    o[1] = std::floor(unit_double(r[2], r[3]) * scale) / scale;
  });
}

Tensor randn(const Shape& sizes, TensorOptions options, Generator* gen) {
  PRECIS_CHECK_DTYPE(is_floating(options.dtype), "randn: dtype must be floating, got ", dtype_name(options.dtype));
  return generate(sizes, options, gen, 2, [](std::array<uint32_t, 4> r, double* o) {
    // Box–Muller: u1 in (0, 1] so the log is finite.
    const double u1 = 1.0 - unit_double(r[0], r[1]);
    const double u2 = unit_double(r[2], r[3]);
    const double radius = std::sqrt(-2.0 * std::log(u1));
    o[0] = radius * std::cos(2.0 * std::numbers::pi * u2);
    o[1] = radius * std::sin(2.0 * std::numbers::pi * u2);
  });
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions options, Generator* gen) {
  PRECIS_CHECK(high > low, "randint: high (", high, ") must be greater than low (", low, ")");
  // The width in unsigned arithmetic: high - low overflows int64 when low = INT64_MIN, high > 0.
  const uint64_t width = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  constexpr int64_t kExact = int64_t{1} << 53;  // integers up to here are exact in double
  if (low >= -kExact && high <= kExact) {
    // Exact in double: low + floor(u · width) for a 53-bit u (the stream precis always drew).
    const double range = static_cast<double>(width);
    Tensor u = generate(sizes, {.dtype = DType::f64}, gen, 2, [range, low](std::array<uint32_t, 4> r, double* o) {
      o[0] = static_cast<double>(low) + std::floor(unit_double(r[0], r[1]) * range);
      o[1] = static_cast<double>(low) + std::floor(unit_double(r[2], r[3]) * range);
    });
    return upload(u.to(options.dtype), options.device);
  }
  // Bounds beyond 2^53 are not exact in double (and may round to 2^63, which no int64 holds):
  // draw 64 bits and scale with a 128-bit product, all in integers.
  Generator& g = gen ? *gen : default_generator();
  Tensor v = empty(sizes, {.dtype = DType::i64});
  const int64_t n = v.numel();
  const int64_t blocks = ceil_div(n, 2);
  const uint64_t start = g.reserve(static_cast<uint64_t>(blocks));
  int64_t* out = v.data_ptr<int64_t>();
  parallel_for(0, blocks, 1024, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const std::array<uint32_t, 4> r = g.block(start + static_cast<uint64_t>(b));
      for (int64_t j = 0; j < 2 && 2 * b + j < n; ++j) {
        const uint64_t bits = (uint64_t{r[2 * j]} << 32) | r[2 * j + 1];
        const auto offset = static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * width) >> 64);
        out[2 * b + j] = static_cast<int64_t>(static_cast<uint64_t>(low) + offset);  // < high: no wrap
      }
    }
  });
  return upload(v.to(options.dtype), options.device);
}

// ---- from host memory -------------------------------------------------------------------------
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes, TensorOptions options) {
  PRECIS_CHECK_SHAPE(shape_numel(sizes) == static_cast<int64_t>(values.size()), "from_vector: ", values.size(),
                     " values do not fill a tensor of shape ", shape_str(sizes));
  Tensor host = empty(sizes, {.dtype = dtype_of<T>()});
  if constexpr (std::is_same_v<T, bool>) {
    bool* p = host.data_ptr<bool>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  } else {
    std::copy(values.begin(), values.end(), host.data_ptr<T>());
  }
  const bool rg = options.requires_grad;
  Tensor t = upload(host.to(options.dtype), options.device);
  if (rg) t.requires_grad_(true);
  return t;
}

template Tensor from_vector<float>(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, TensorOptions);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, TensorOptions);
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&, TensorOptions);
template Tensor from_vector<Half>(const std::vector<Half>&, const Shape&, TensorOptions);
template Tensor from_vector<BFloat16>(const std::vector<BFloat16>&, const Shape&, TensorOptions);

Tensor from_blob(void* data, const Shape& sizes, DType dtype, Device device) {
  const std::optional<uint64_t> nbytes = checked_nbytes(shape_numel(sizes), element_size(dtype));
  PRECIS_CHECK_SHAPE(nbytes.has_value(), "from_blob: a tensor of shape ", shape_str(sizes), " and dtype ",
                     dtype_name(dtype), " spans more bytes than a 64-bit offset can address");
  auto storage = std::make_shared<StorageImpl>(data, static_cast<size_t>(*nbytes), device, nullptr);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), sizes, contiguous_strides(sizes), 0, dtype));
}

}  // namespace precis
