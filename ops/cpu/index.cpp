// Joining and indexing on the CPU: cat, index_select, gather, index_add, scatter_add.
// index_select and index_add are gather and scatter_add with a 1-D index broadcast over the other
// dims (stride 0), so each pair shares one loop. Indices arrive i64 and range-checked.
#include <algorithm>
#include <cstring>

#include "ops/cpu/cpu_backend.h"
#include "core/dtype_visit.h"
#include "core/opmath.h"
#include "ops/detail/cat_by_copy.h"
#include "ops/cpu/loops.h"
#include "ops/contracts/kernels.h"
#include "ops/op_table.h"
#include "tensor/factory.h"

namespace precis::cpu {

namespace {

// Other-dim positions a scatter work block covers; also the size below which scatter walks the
// indexed dim innermost instead.
constexpr int64_t kScatterBlock = 1024;

// A 1-D index (length sizes[dim]) seen as a tensor of `sizes`: stride 1 along dim, 0 elsewhere.
Tensor broadcast_index(const Tensor& index, const Shape& sizes, int64_t dim) {
  Shape strides(sizes.size(), 0);
  strides[dim] = index.strides().empty() ? 1 : index.strides()[0];
  return detail::make_alias(index, sizes, strides, index.storage_offset());
}

// out = x.gather(dim, index). x, index: at least 1-D (ops/index.cpp views 0-d as [1]).
// out: index's shape, contiguous; x: any strides; index: i64, any
// strides (stride 0 for a broadcast index_select index). Each output element is written once, so
// any split over the pool is safe.
template <typename T>
void gather_kernel(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  T* o = static_cast<T*>(out.data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  const int64_t* ip = static_cast<const int64_t*>(index.data_ptr());
  const int64_t dim_stride = x.strides()[dim];
  Shape sizes = index.sizes();
  std::array<Shape, 3> strides{out.strides(), index.strides(), x.strides()};
  strides[2][dim] = 0;  // the dim coordinate comes from the index
  const int64_t numel = index.numel();
  if (numel == 0) return;
  // The front-end checks indices on the CPU before this runs; on a device it only records the
  // check (ops/device_asserts.h), and the tests' fake device (tests/support/fake_cuda) runs this
  // kernel there: an index out of range then reads zeros instead of out of bounds.
  const int64_t rows = x.sizes()[dim];
  coalesce_dims<3>(sizes, strides);
  parallel_for(0, numel, kElementwiseGrain, [&](int64_t b, int64_t e) {
    for_each_row<3>(sizes, strides, b, e, [&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
      T* op = o + off[0];
      const int64_t* idx = ip + off[1];
      const T* src = xp + off[2];
      if (st[1] == 0 && (idx[0] < 0 || idx[0] >= rows)) [[unlikely]] {
        for (int64_t i = 0; i < n; ++i) op[i * st[0]] = T{};
      } else if (st[1] == 0) {  // one index for the whole row (index_select): a strided row copy
        const T* s = src + idx[0] * dim_stride;
        if (st[0] == 1 && st[2] == 1) {
          std::copy(s, s + n, op);
        } else {
          for (int64_t i = 0; i < n; ++i) op[i * st[0]] = s[i * st[2]];
        }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = idx[i * st[1]];
          op[i * st[0]] = k >= 0 && k < rows ? src[i * st[2] + k * dim_stride] : T{};
        }
      }
    });
  });
}

// out[pos with dim coordinate replaced by index[pos]] += src[pos] for every pos of index's shape.
// out: contiguous, element type O (T itself, or the fp32 accumulator of an f16/bf16 out: see
// scatter_add_accumulate); src (T) and index: any strides, at least 1-D. Two positions can hit
// the same output element only when they differ in the dim coordinate alone, so the pool is split
// over the other coordinates: no two threads ever add into one element, and every element gets
// its additions in increasing order of the dim coordinate whatever the split: deterministic.
template <typename T, typename O>
void scatter_add_impl(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  using A = opmath_t<T>;
  O* o = static_cast<O*>(out.data_ptr());
  const T* sp = static_cast<const T*>(src.data_ptr());
  const int64_t* ip = static_cast<const int64_t*>(index.data_ptr());
  const int64_t numel = index.numel();
  if (numel == 0) return;
  const int64_t nd = index.dim();
  const int64_t dim_stride = out.strides()[dim];
  const int64_t k = index.sizes()[dim];
  const int64_t outer = numel / k;
  Shape sizes;
  std::array<Shape, 3> strides;
  auto push = [&](int64_t d) {
    sizes.push_back(index.sizes()[d]);
    strides[0].push_back(d == dim ? 0 : out.strides()[d]);
    strides[1].push_back(index.strides()[d]);
    strides[2].push_back(src.strides()[d]);
  };
  auto add_row = [&](O* op, const int64_t* idx, const T* s, int64_t n, std::array<int64_t, 3> st) {
    if (st[1] == 0) {  // one target row for the whole run (index_add)
      O* d = op + idx[0] * dim_stride;
      if (st[0] == 1 && st[2] == 1) {
        for (int64_t i = 0; i < n; ++i) d[i] = convert<O>(static_cast<A>(d[i]) + static_cast<A>(s[i]));
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * st[0]] = convert<O>(static_cast<A>(d[i * st[0]]) + static_cast<A>(s[i * st[2]]));
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        O& dst = op[i * st[0] + idx[i * st[1]] * dim_stride];
        dst = convert<O>(static_cast<A>(dst) + static_cast<A>(s[i * st[2]]));
      }
    }
  };
  for (int64_t d = 0; d < nd; ++d)
    if (d != dim) push(d);

  // Walk dim innermost only where dim is out's contiguous dim (or there are too few other
  // positions to fill a vector). Else, e.g. an embedding gradient (V, 256) += src (N, 256) along
  // dim 0, walking dim innermost hops between table rows at every element (a TLB miss each);
  // the blocked walk below adds whole contiguous rows. Both add in the same order.
  if (outer < kScatterBlock && (out.strides()[dim] == 1 || outer < 16)) {
    // Few positions across dim: walk dim innermost, one thread per group of other coordinates.
    push(dim);
    coalesce_dims<3>(sizes, strides);
    parallel_for(0, outer, std::max<int64_t>(1, kElementwiseGrain / k), [&](int64_t b, int64_t e) {
      for_each_row<3>(sizes, strides, b * k, e * k, [&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
        add_row(o + off[0], ip + off[1], sp + off[2], n, st);
      });
    });
    return;
  }
  // Many other coordinates (e.g. embedding rows): blocks of them, each visited once per step
  // along dim, so that the inner loop runs along the (usually contiguous) trailing dims.
  if (sizes.empty()) {
    sizes = {1};
    for (auto& st : strides) st = {0};
  }
  coalesce_dims<3>(sizes, strides);
  const int64_t index_dim_stride = index.strides()[dim], src_dim_stride = src.strides()[dim];
  parallel_for(0, outer, std::max<int64_t>(1, kElementwiseGrain / k), [&](int64_t b, int64_t e) {
    for (int64_t b0 = b; b0 < e; b0 += kScatterBlock) {
      const int64_t e0 = std::min(e, b0 + kScatterBlock);
      for (int64_t j = 0; j < k; ++j) {
        for_each_row<3>(sizes, strides, b0, e0, [&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
          add_row(o + off[0], ip + off[1] + j * index_dim_stride, sp + off[2] + j * src_dim_stride, n, st);
        });
      }
    }
  });
}

// out: index.numel() along dim, x's sizes elsewhere, contiguous. index: 1-D i64.
template <typename T>
void index_select_kernel(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  gather_kernel<T>(out, x, dim, broadcast_index(index, out.sizes(), dim));
}

// scatter_add_impl with the additions accumulated in opmath_t<T>: an f16/bf16 out is widened to an
// fp32 buffer, added into, and rounded back once, so an element hit many times (the embedding
// row of a frequent token) does not lose its small contributions to a rounding per addition.
template <typename T>
void scatter_add_accumulate(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if constexpr (std::is_same_v<opmath_t<T>, T>) {
    scatter_add_impl<T, T>(out, dim, index, src);
  } else {
    Tensor acc = empty(out.sizes(), {.dtype = DType::f32});  // contiguous, as out
    kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cpu, DType::f32)(acc, out);
    scatter_add_impl<T, float>(acc, dim, index, src);
    kernel<kernels::CopyKernel>(OpId::copy, DeviceType::cpu, out.dtype())(out, acc);
  }
}

template <typename T>
void scatter_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_add_accumulate<T>(out, dim, index, src);
}

// src: index.numel() along dim, out's sizes elsewhere.
template <typename T>
void index_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_add_accumulate<T>(out, dim, broadcast_index(index, src.sizes(), dim), src);
}

}  // namespace

void register_index_kernels() {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dt = static_cast<DType>(i);
    register_kernel<kernels::CatKernel>(OpId::cat, DeviceType::cpu, dt, &kernels::cat_by_copy);
    if (is_float8(dt)) continue;  // fp8 joins by copy only (no indexing kernels, as in PyTorch)
    visit_dtype(dt, [&]<typename T>() {
      register_kernel<kernels::IndexSelectKernel>(OpId::index_select, DeviceType::cpu, dt, &index_select_kernel<T>);
      register_kernel<kernels::GatherKernel>(OpId::gather, DeviceType::cpu, dt, &gather_kernel<T>);
      if constexpr (!std::is_same_v<T, bool>) {
        register_kernel<kernels::IndexAddKernel>(OpId::index_add, DeviceType::cpu, dt, &index_add_kernel<T>);
        register_kernel<kernels::ScatterAddKernel>(OpId::scatter_add, DeviceType::cpu, dt, &scatter_add_kernel<T>);
      }
    });
  }
}

}  // namespace precis::cpu
