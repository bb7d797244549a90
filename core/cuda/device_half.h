#pragma once
// CUDA's 16-bit float types, for core/opmath.h when nvcc compiles it. A header of its own so that
// opmath.h, which host code and installed headers include, names no CUDA header itself (the
// install step leaves out every header that includes one).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
