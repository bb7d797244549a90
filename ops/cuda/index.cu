// Indexing kernels on CUDA devices: gather (and index_select, a gather with a broadcast index),
// index_add and scatter_add. The adds are deterministic with no atomics: one thread per output
// element adds its contributions in increasing position along the indexed dim (ops/math/index_math.h,
// the order of the CPU kernel), so results are the same on every run and equal the CPU's.
#include <bit>

#include <cub/device/device_radix_sort.cuh>

#include "ops/cuda/device_math.cuh"
#include "ops/cuda/index_pool_kernels.h"
#include "ops/math/index_math.h"

namespace precis::cuda {

namespace {

template <int N>
__device__ __forceinline__ void offsets_of(const ElementwiseLaunch& l, int64_t i, int64_t (&off)[N]) {
  if (l.contiguous) {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = i;
  } else {
    compute_offsets<N>(l.calc, i, off);
  }
}

// Bits of one element, by size: gather moves elements without looking at them.
template <size_t S> struct Bits;
template <> struct Bits<1> { using type = uint8_t; };
template <> struct Bits<2> { using type = uint16_t; };
template <> struct Bits<4> { using type = uint32_t; };
template <> struct Bits<8> { using type = uint64_t; };

template <typename B>
__global__ void gather_kernel(B* __restrict__ out, const int64_t* __restrict__ index, const B* __restrict__ x,
                              int64_t dim_stride, int64_t dim_size, const ElementwiseLaunch l) {
  PRECIS_GRID_STRIDE_LOOP(i, l.numel) {
    int64_t off[3];
    offsets_of<3>(l, i, off);
    const int64_t j = index[off[1]];
    out[off[0]] = j >= 0 && j < dim_size ? x[off[2] + j * dim_stride] : B(0);
  }
}

template <typename T>
__global__ void index_add_kernel(T* __restrict__ out, const T* __restrict__ src, const int64_t* __restrict__ groups,
                                 const IndexAddLaunch a) {
  const int64_t* positions = groups + a.rows + 1;
  PRECIS_GRID_STRIDE_LOOP(t, a.l.numel) {
    const int64_t r = (t / a.inner) % a.rows;
    const int64_t begin = groups[r], end = groups[r + 1];
    if (begin == end) continue;  // a row no index names: unchanged
    int64_t off[2];
    offsets_of<2>(a.l, t, off);
    out[off[0]] = kernels::index_add_element(out[off[0]], src + off[1], a.src_dim_stride, positions, begin, end);
  }
}

// index_add's grouping on the device (kernels::group_key / group_offset): the sort keys and the
// positions to sort with them, then each row's first position in the sorted keys.
__global__ void group_keys_kernel(const int64_t* __restrict__ index, int64_t k, int64_t rows, uint64_t* __restrict__ keys,
                                  int64_t* __restrict__ positions) {
  PRECIS_GRID_STRIDE_LOOP(i, k) {
    keys[i] = kernels::group_key(index[i], rows);
    positions[i] = i;
  }
}

__global__ void group_offsets_kernel(const uint64_t* __restrict__ sorted_keys, int64_t k, int64_t rows,
                                     int64_t* __restrict__ offsets) {
  PRECIS_GRID_STRIDE_LOOP(r, rows + 1) offsets[r] = kernels::group_offset(sorted_keys, k, r);
}

// The scratch layout of launch_group_index_rows: keys in, keys out, positions in (k each), then
// CUB's temporary storage, each 256-byte aligned.
size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

size_t radix_sort_temp_bytes(int64_t k, int end_bit) {
  size_t bytes = 0;
  PRECIS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                                                    static_cast<uint64_t*>(nullptr), static_cast<const int64_t*>(nullptr),
                                                    static_cast<int64_t*>(nullptr), k, 0, end_bit),
                    "sizing index_add's grouping sort (", k, " indices)");
  return bytes;
}

// Keys are at most rows: the sort looks at those bits only.
int key_bits(int64_t rows) { return std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(rows)))); }

// Thread t: output row t % rows of column t / rows.
template <typename T>
__global__ void scatter_add_kernel(T* __restrict__ out, const int64_t* __restrict__ index, const T* __restrict__ src,
                                   const ScatterAddLaunch a) {
  const int64_t total = a.l.numel * a.rows;
  PRECIS_GRID_STRIDE_LOOP(t, total) {
    const int64_t col = t / a.rows, j = t % a.rows;
    int64_t off[3];
    offsets_of<3>(a.l, col, off);
    T* dst = out + off[0] + j * a.out_dim_stride;
    bool hit = false;
    const T v = kernels::scatter_add_element(*dst, j, index + off[1], a.index_dim_stride, src + off[2],
                                             a.src_dim_stride, a.k, hit);
    if (hit) *dst = v;
  }
}

// Thread t = c·k + i: the grouping key of entry i of column c (kernels::scatter_flat_index).
__global__ void scatter_keys_kernel(int64_t* __restrict__ flat, const int64_t* __restrict__ index,
                                    const ScatterAddLaunch a) {
  PRECIS_GRID_STRIDE_LOOP(t, a.l.numel * a.k) {
    const int64_t col = t / a.k, i = t % a.k;
    int64_t off[3];
    offsets_of<3>(a.l, col, off);
    flat[t] = kernels::scatter_flat_index(index[off[1] + i * a.index_dim_stride], col, a.rows);
  }
}

// Thread t: output row t % rows of column t / rows, from its group of the column's entries.
template <typename T>
__global__ void scatter_add_grouped_kernel(T* __restrict__ out, const T* __restrict__ src,
                                           const int64_t* __restrict__ groups, const ScatterAddLaunch a) {
  const int64_t total = a.l.numel * a.rows;
  const int64_t* positions = groups + total + 1;
  PRECIS_GRID_STRIDE_LOOP(t, total) {
    const int64_t begin = groups[t], end = groups[t + 1];
    if (begin == end) continue;  // nothing adds to it: unchanged
    const int64_t col = t / a.rows, j = t % a.rows;
    int64_t off[3];
    offsets_of<3>(a.l, col, off);
    T* dst = out + off[0] + j * a.out_dim_stride;
    *dst = kernels::index_add_element(*dst, src + off[2], a.src_dim_stride, positions, begin, end, col * a.k);
  }
}

}  // namespace

void launch_gather(size_t elem_size, void* out, const int64_t* index, const void* x, int64_t dim_stride,
                   int64_t dim_size, const ElementwiseLaunch& l) {
  if (l.numel == 0) return;
  auto run = [&]<size_t S>() {
    using B = typename Bits<S>::type;
    gather_kernel<B><<<grid_for(l.numel), kThreads, 0, l.stream>>>(static_cast<B*>(out), index,
                                                                   static_cast<const B*>(x), dim_stride, dim_size, l);
  };
  switch (elem_size) {
    case 1: run.template operator()<1>(); break;
    case 2: run.template operator()<2>(); break;
    case 4: run.template operator()<4>(); break;
    case 8: run.template operator()<8>(); break;
    default: PRECIS_INTERNAL_ASSERT(false, "gather: no kernel for elements of ", elem_size, " bytes");
  }
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the gather kernel (", l.numel, " elements of ", elem_size,
                    " bytes)");
}

size_t group_index_scratch_bytes(int64_t k, int64_t rows) {
  return 3 * align_up(static_cast<size_t>(k) * 8) + align_up(radix_sort_temp_bytes(k, key_bits(rows)));
}

void launch_group_index_rows(const int64_t* index, int64_t k, int64_t rows, int64_t* groups, void* scratch,
                             size_t scratch_bytes, cudaStream_t stream) {
  PRECIS_INTERNAL_ASSERT(scratch_bytes >= group_index_scratch_bytes(k, rows), "index_add: grouping scratch of ",
                         scratch_bytes, " bytes for ", k, " indices");
  char* base = static_cast<char*>(scratch);
  const size_t slot = align_up(static_cast<size_t>(k) * 8);
  auto* keys_in = reinterpret_cast<uint64_t*>(base);
  auto* keys_out = reinterpret_cast<uint64_t*>(base + slot);
  auto* positions_in = reinterpret_cast<int64_t*>(base + 2 * slot);
  void* temp = base + 3 * slot;
  size_t temp_bytes = scratch_bytes - 3 * slot;
  if (k > 0) {
    group_keys_kernel<<<grid_for(k), kThreads, 0, stream>>>(index, k, rows, keys_in, positions_in);
    PRECIS_CUDA_CHECK(cudaGetLastError(), "launching index_add's grouping keys (", k, " indices)");
    // Radix sort is stable: within a row the positions stay increasing, the CPU kernel's order.
    PRECIS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, positions_in,
                                                      groups + rows + 1, k, 0, key_bits(rows), stream),
                      "sorting index_add's index (", k, " indices)");
  }
  group_offsets_kernel<<<grid_for(rows + 1), kThreads, 0, stream>>>(keys_out, k, rows, groups);
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching index_add's grouping offsets (", rows, " rows)");
}

void launch_index_add(DType dtype, void* out, const void* src, const int64_t* groups, const IndexAddLaunch& a) {
  if (a.l.numel == 0 || a.rows == 0) return;
  visit_device_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      PRECIS_INTERNAL_ASSERT(false, "index_add: bool has no add");
    } else {
      index_add_kernel<T><<<grid_for(a.l.numel), kThreads, 0, a.l.stream>>>(
          static_cast<T*>(out), static_cast<const T*>(src), groups, a);
    }
  });
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the index_add kernel (", dtype_name(dtype), ", ", a.l.numel,
                    " elements)");
}

size_t scatter_add_grouped_scratch_bytes(const ScatterAddLaunch& a) {
  return group_index_scratch_bytes(a.l.numel * a.k, a.l.numel * a.rows);
}

void launch_scatter_add_grouped(DType dtype, void* out, const int64_t* index, const void* src,
                                const ScatterAddLaunch& a, int64_t* flat, int64_t* groups, void* scratch,
                                size_t scratch_bytes) {
  const int64_t entries = a.l.numel * a.k, outputs = a.l.numel * a.rows;
  if (entries == 0 || outputs == 0) return;
  scatter_keys_kernel<<<grid_for(entries), kThreads, 0, a.l.stream>>>(flat, index, a);
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching scatter_add's grouping keys (", entries, " entries)");
  launch_group_index_rows(flat, entries, outputs, groups, scratch, scratch_bytes, a.l.stream);
  visit_device_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      PRECIS_INTERNAL_ASSERT(false, "scatter_add: bool has no add");
    } else {
      scatter_add_grouped_kernel<T><<<grid_for(outputs), kThreads, 0, a.l.stream>>>(
          static_cast<T*>(out), static_cast<const T*>(src), groups, a);
    }
  });
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the grouped scatter_add kernel (", dtype_name(dtype), ", ",
                    outputs, " outputs)");
}

void launch_scatter_add(DType dtype, void* out, const int64_t* index, const void* src, const ScatterAddLaunch& a) {
  const int64_t total = a.l.numel * a.rows;
  if (total == 0 || a.k == 0) return;
  visit_device_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      PRECIS_INTERNAL_ASSERT(false, "scatter_add: bool has no add");
    } else {
      scatter_add_kernel<T><<<grid_for(total), kThreads, 0, a.l.stream>>>(static_cast<T*>(out), index,
                                                                           static_cast<const T*>(src), a);
    }
  });
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the scatter_add kernel (", dtype_name(dtype), ", ", total,
                    " outputs)");
}

}  // namespace precis::cuda
