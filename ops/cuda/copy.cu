// copy (strided, with dtype conversion), fill, where and masked_fill on CUDA devices. fill, where
// and masked_fill move element bits, so they are instantiated per element size, not per dtype.
#include <cstring>

#include "ops/cuda/device_math.cuh"

namespace precis::cuda {

namespace {

// dst, src: (numel) contiguous. Conversion through fp32 for f16/bf16 (f64 directly).
template <typename Dst, typename Src>
__global__ void copy_contiguous_kernel(Dst* __restrict__ dst, const Src* __restrict__ src, int64_t n) {
  PRECIS_GRID_STRIDE_LOOP(i, n) { dst[i] = convert<Dst>(src[i]); }
}

// dst, src: any strides over calc's shape (operand 0 = dst, 1 = src; src stride 0 = broadcast).
template <typename Dst, typename Src>
__global__ void copy_strided_kernel(Dst* __restrict__ dst, const Src* __restrict__ src, int64_t n,
                                    const OffsetCalc calc) {
  PRECIS_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    compute_offsets<2>(calc, i, off);
    dst[off[0]] = convert<Dst>(src[off[1]]);
  }
}

// Fill works on raw element bits (the host did the conversion), so four element sizes cover
// every dtype. T: an unsigned integer of the element's size.
template <typename T>
__global__ void fill_contiguous_kernel(T* __restrict__ dst, T value, int64_t n) {
  PRECIS_GRID_STRIDE_LOOP(i, n) { dst[i] = value; }
}

template <typename T>
__global__ void fill_strided_kernel(T* __restrict__ dst, T value, int64_t n, const OffsetCalc calc) {
  PRECIS_GRID_STRIDE_LOOP(i, n) {
    int64_t off[1];
    compute_offsets<1>(calc, i, off);
    dst[off[0]] = value;
  }
}

template <typename T>
void fill_as(void* dst, uint64_t bits, const ElementwiseLaunch& l) {
  T value;
  std::memcpy(&value, &bits, sizeof(T));  // little-endian: the low bytes hold the element
  T* d = static_cast<T*>(dst);
  if (l.contiguous) {
    fill_contiguous_kernel<T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(d, value, l.numel);
  } else {
    fill_strided_kernel<T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(d, value, l.numel, l.calc);
  }
}

// The unsigned integer of an element size, for kernels that only move bits.
template <typename F>
void visit_elem_size(size_t elem_size, F&& f) {
  switch (elem_size) {
    case 1: f.template operator()<uint8_t>(); return;
    case 2: f.template operator()<uint16_t>(); return;
    case 4: f.template operator()<uint32_t>(); return;
    case 8: f.template operator()<uint64_t>(); return;
  }
  throw InternalError("unsupported element size");
}

// out, cond, a, b: (numel) contiguous.
template <typename T>
__global__ void where_contiguous_kernel(T* __restrict__ out, const bool* __restrict__ cond, const T* __restrict__ a,
                                        const T* __restrict__ b, int64_t n) {
  PRECIS_GRID_STRIDE_LOOP(i, n) { out[i] = cond[i] ? a[i] : b[i]; }
}

// Operands 0..3 = out, cond, a, b over calc's shape (stride 0 = broadcast).
template <typename T>
__global__ void where_strided_kernel(T* __restrict__ out, const bool* __restrict__ cond, const T* __restrict__ a,
                                     const T* __restrict__ b, int64_t n, const OffsetCalc calc) {
  PRECIS_GRID_STRIDE_LOOP(i, n) {
    int64_t off[4];
    compute_offsets<4>(calc, i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

// out, x, mask: (numel) contiguous.
template <typename T>
__global__ void masked_fill_contiguous_kernel(T* __restrict__ out, const T* __restrict__ x,
                                              const bool* __restrict__ mask, T value, int64_t n) {
  PRECIS_GRID_STRIDE_LOOP(i, n) { out[i] = mask[i] ? value : x[i]; }
}

// Operands 0..2 = out, x, mask over calc's shape.
template <typename T>
__global__ void masked_fill_strided_kernel(T* __restrict__ out, const T* __restrict__ x, const bool* __restrict__ mask,
                                           T value, int64_t n, const OffsetCalc calc) {
  PRECIS_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    compute_offsets<3>(calc, i, off);
    out[off[0]] = mask[off[2]] ? value : x[off[1]];
  }
}

}  // namespace

void launch_copy(DType dst_dtype, void* dst, DType src_dtype, const void* src, const ElementwiseLaunch& l) {
  if (l.numel == 0) return;
  // fp8 on either side: the shared conversions of core/float8.h, so the device casts as the CPU.
  visit_dtype_with_fp8<DeviceTypes>(dst_dtype, [&]<typename Dst>() {
    visit_dtype_with_fp8<DeviceTypes>(src_dtype, [&]<typename Src>() {
      Dst* d = static_cast<Dst*>(dst);
      const Src* s = static_cast<const Src*>(src);
      if (l.contiguous) {
        copy_contiguous_kernel<Dst, Src><<<grid_for(l.numel), kThreads, 0, l.stream>>>(d, s, l.numel);
      } else {
        copy_strided_kernel<Dst, Src><<<grid_for(l.numel), kThreads, 0, l.stream>>>(d, s, l.numel, l.calc);
      }
    });
  });
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the copy kernel (", dtype_name(src_dtype), " -> ",
                    dtype_name(dst_dtype), ", ", l.numel, " elements)");
}

void launch_fill(size_t elem_size, void* dst, uint64_t bits, const ElementwiseLaunch& l) {
  if (l.numel == 0) return;
  visit_elem_size(elem_size, [&]<typename T>() { fill_as<T>(dst, bits, l); });
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the fill kernel (", l.numel, " elements of ", elem_size,
                    " bytes)");
}

void launch_where(size_t elem_size, void* out, const bool* cond, const void* a, const void* b,
                  const ElementwiseLaunch& l) {
  if (l.numel == 0) return;
  visit_elem_size(elem_size, [&]<typename T>() {
    T* o = static_cast<T*>(out);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    if (l.contiguous) {
      where_contiguous_kernel<T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(o, cond, pa, pb, l.numel);
    } else {
      where_strided_kernel<T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(o, cond, pa, pb, l.numel, l.calc);
    }
  });
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the where kernel (", l.numel, " elements of ", elem_size,
                    " bytes)");
}

void launch_masked_fill(size_t elem_size, void* out, const void* x, const bool* mask, uint64_t bits,
                        const ElementwiseLaunch& l) {
  if (l.numel == 0) return;
  visit_elem_size(elem_size, [&]<typename T>() {
    T value;
    std::memcpy(&value, &bits, sizeof(T));  // little-endian: the low bytes hold the element
    T* o = static_cast<T*>(out);
    const T* px = static_cast<const T*>(x);
    if (l.contiguous) {
      masked_fill_contiguous_kernel<T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(o, px, mask, value, l.numel);
    } else {
      masked_fill_strided_kernel<T><<<grid_for(l.numel), kThreads, 0, l.stream>>>(o, px, mask, value, l.numel,
                                                                                  l.calc);
    }
  });
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the masked_fill kernel (", l.numel, " elements of ", elem_size,
                    " bytes)");
}

}  // namespace precis::cuda
