#pragma once
// Primitive descriptors built the same way under oneDNN 2.x and 3.x. oneDNN 3.0 removed the
// operation descriptors (`dnnl::matmul::desc`, `dnnl::convolution_forward::desc`, ...): a primitive
// descriptor is built from the engine and the memory descriptors directly. precis builds against
// Debian 12's oneDNN 2.6 (the default) and against 3.x (PyPI's onednn-cpu-gomp, newer distributions;
// docs/design/cpu-gemm.md, "oneDNN versions"), so every primitive precis creates goes through these. Header-only:
// the benchmarks' direct oneDNN calls use it too. Includes oneDNN's header.
#ifdef PRECIS_HAS_ONEDNN

#include <oneapi/dnnl/dnnl.hpp>

#ifndef DNNL_VERSION_MAJOR
#error "oneDNN's version macros are missing: precis needs oneDNN 2.6 or later"
#endif

namespace precis::cpu::onednn {

using dnnl::memory;

/// Where a convolution's window goes: strides, dilations (counted from 0, oneDNN's convention) and
/// the padding on each side.
struct ConvWindow {
  memory::dims strides, dilates, padding_l, padding_r;
};

/// a · b (+ bias) → c; `bias` null for none.
inline dnnl::matmul::primitive_desc matmul_pd(const dnnl::engine& e, const memory::desc& a, const memory::desc& b,
                                              const memory::desc* bias, const memory::desc& c,
                                              const dnnl::primitive_attr& attr = {}) {
#if DNNL_VERSION_MAJOR >= 3
  return bias != nullptr ? dnnl::matmul::primitive_desc(e, a, b, *bias, c, attr)
                         : dnnl::matmul::primitive_desc(e, a, b, c, attr);
#else
  return bias != nullptr ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, *bias, c), attr, e)
                         : dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, e);
#endif
}

/// Convolution forward by `alg` (direct or winograd); `bias` null for none.
inline dnnl::convolution_forward::primitive_desc conv_forward_pd(const dnnl::engine& e, dnnl::prop_kind prop,
                                                                 const memory::desc& src,
                                                                 const memory::desc& weights,
                                                                 const memory::desc* bias, const memory::desc& dst,
                                                                 const ConvWindow& w,
                                                                 const dnnl::primitive_attr& attr = {},
                                                                 dnnl::algorithm alg =
                                                                     dnnl::algorithm::convolution_direct) {
#if DNNL_VERSION_MAJOR >= 3
  return bias != nullptr ? dnnl::convolution_forward::primitive_desc(e, prop, alg, src, weights, *bias, dst, w.strides,
                                                                     w.dilates, w.padding_l, w.padding_r, attr)
                         : dnnl::convolution_forward::primitive_desc(e, prop, alg, src, weights, dst, w.strides,
                                                                     w.dilates, w.padding_l, w.padding_r, attr);
#else
  return bias != nullptr
             ? dnnl::convolution_forward::primitive_desc(
                   dnnl::convolution_forward::desc(prop, alg, src, weights, *bias, dst, w.strides, w.dilates,
                                                   w.padding_l, w.padding_r),
                   attr, e)
             : dnnl::convolution_forward::primitive_desc(
                   dnnl::convolution_forward::desc(prop, alg, src, weights, dst, w.strides, w.dilates, w.padding_l,
                                                   w.padding_r),
                   attr, e);
#endif
}

/// The convolution's input gradient by `alg`, planned after the forward `hint`.
inline dnnl::convolution_backward_data::primitive_desc conv_backward_data_pd(
    const dnnl::engine& e, const memory::desc& diff_src, const memory::desc& weights, const memory::desc& diff_dst,
    const ConvWindow& w, const dnnl::convolution_forward::primitive_desc& hint, const dnnl::primitive_attr& attr = {},
    dnnl::algorithm alg = dnnl::algorithm::convolution_direct) {
#if DNNL_VERSION_MAJOR >= 3
  return {e, alg, diff_src, weights, diff_dst, w.strides, w.dilates, w.padding_l, w.padding_r, hint, attr};
#else
  return {dnnl::convolution_backward_data::desc(alg, diff_src, weights, diff_dst, w.strides, w.dilates, w.padding_l,
                                                w.padding_r),
          attr, e, hint};
#endif
}

/// The convolution's weight (and, when `diff_bias` is not null, bias) gradient by `alg`, planned
/// after the forward `hint`.
inline dnnl::convolution_backward_weights::primitive_desc conv_backward_weights_pd(
    const dnnl::engine& e, const memory::desc& src, const memory::desc& diff_weights, const memory::desc* diff_bias,
    const memory::desc& diff_dst, const ConvWindow& w, const dnnl::convolution_forward::primitive_desc& hint,
    const dnnl::primitive_attr& attr = {}, dnnl::algorithm alg = dnnl::algorithm::convolution_direct) {
    using pd = dnnl::convolution_backward_weights::primitive_desc;
#if DNNL_VERSION_MAJOR >= 3
  return diff_bias != nullptr ? pd(e, alg, src, diff_weights, *diff_bias, diff_dst, w.strides, w.dilates,
                                   w.padding_l, w.padding_r, hint, attr)
                              : pd(e, alg, src, diff_weights, diff_dst, w.strides, w.dilates, w.padding_l,
                                   w.padding_r, hint, attr);
#else
  using desc = dnnl::convolution_backward_weights::desc;
  return diff_bias != nullptr ? pd(desc(alg, src, diff_weights, *diff_bias, diff_dst, w.strides, w.dilates,
                                        w.padding_l, w.padding_r),
                                   attr, e, hint)
                              : pd(desc(alg, src, diff_weights, diff_dst, w.strides, w.dilates, w.padding_l,
                                        w.padding_r),
                                   attr, e, hint);
#endif
}

}  // namespace precis::cpu::onednn

#endif  // PRECIS_HAS_ONEDNN
