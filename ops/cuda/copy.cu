// copy (strided, with dtype conversion) and fill on CUDA devices.
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

}  // namespace

void launch_copy(DType dst_dtype, void* dst, DType src_dtype, const void* src, const ElementwiseLaunch& l) {
  if (l.numel == 0) return;
  visit_device_dtype(dst_dtype, [&]<typename Dst>() {
    visit_device_dtype(src_dtype, [&]<typename Src>() {
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
  switch (elem_size) {
    case 1: fill_as<uint8_t>(dst, bits, l); break;
    case 2: fill_as<uint16_t>(dst, bits, l); break;
    case 4: fill_as<uint32_t>(dst, bits, l); break;
    case 8: fill_as<uint64_t>(dst, bits, l); break;
    default: throw InternalError("launch_fill: unsupported element size");
  }
  PRECIS_CUDA_CHECK(cudaGetLastError(), "launching the fill kernel (", l.numel, " elements of ", elem_size,
                    " bytes)");
}

}  // namespace precis::cuda
