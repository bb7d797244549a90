// Convolution as im2col + GEMM (Eigen): the f64 path, and the f32 path when oneDNN is absent or
// has no fast kernel. Each batch entry unfolds its input windows into a (C/g·kH·kW, Ho·Wo)
// column matrix and multiplies it with the weight of each group; the batch is split over the
// intra-op pool, each chunk with its own column buffer (and, for the weight gradient, its own
// partial sum).
#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include <Eigen/Core>

#include "core/thread_pool.h"
#include "ops/cpu/conv_impl.h"

namespace precis::cpu {

namespace {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MapMat = Eigen::Map<RowMat<T>>;
template <typename T>
using ConstMapMat = Eigen::Map<const RowMat<T>>;

// Batch entries per chunk: one chunk per thread at most, and a chunk is worth a worker when it
// does at least ~1 MFLOP.
int64_t batch_grain(const ConvShape& s) {
  const int64_t flops = 2 * s.o * (s.c / s.p.groups) * s.kh * s.kw * s.ho * s.wo;
  return std::max<int64_t>(1, (1 << 20) / std::max<int64_t>(flops, 1));
}

// A 1×1 kernel with stride 1 and no padding reads the input as its own column matrix.
bool is_pointwise(const ConvShape& s) {
  return s.kh == 1 && s.kw == 1 && s.p.stride[0] == 1 && s.p.stride[1] == 1 && s.p.padding[0] == 0 &&
         s.p.padding[1] == 0;
}

// col: (cg·kh·kw, ho·wo) = the windows of x: (cg, h, w) (one group of one batch entry), 0 in the
// padding.
template <typename T>
void im2col(const ConvShape& s, int64_t cg, const T* x, T* col) {
  const int64_t p = s.ho * s.wo;
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        T* row = col + ((c * s.kh + i) * s.kw + j) * p;
        for (int64_t oh = 0; oh < s.ho; ++oh) {
          const int64_t ih = oh * s.p.stride[0] - s.p.padding[0] + i * s.p.dilation[0];
          T* out = row + oh * s.wo;
          if (ih < 0 || ih >= s.h) {
            std::fill(out, out + s.wo, T(0));
            continue;
          }
          const T* in = x + (c * s.h + ih) * s.w;
          for (int64_t ow = 0; ow < s.wo; ++ow) {
            const int64_t iw = ow * s.p.stride[1] - s.p.padding[1] + j * s.p.dilation[1];
            out[ow] = iw >= 0 && iw < s.w ? in[iw] : T(0);
          }
        }
      }
}

// x: (cg, h, w) += the column matrix col folded back onto the positions it was read from.
template <typename T>
void col2im_add(const ConvShape& s, int64_t cg, const T* col, T* x) {
  const int64_t p = s.ho * s.wo;
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        const T* row = col + ((c * s.kh + i) * s.kw + j) * p;
        for (int64_t oh = 0; oh < s.ho; ++oh) {
          const int64_t ih = oh * s.p.stride[0] - s.p.padding[0] + i * s.p.dilation[0];
          if (ih < 0 || ih >= s.h) continue;
          T* out = x + (c * s.h + ih) * s.w;
          const T* in = row + oh * s.wo;
          for (int64_t ow = 0; ow < s.wo; ++ow) {
            const int64_t iw = ow * s.p.stride[1] - s.p.padding[1] + j * s.p.dilation[1];
            if (iw >= 0 && iw < s.w) out[iw] += in[ow];
          }
        }
      }
}

}  // namespace

// out: (n, o, ho, wo) = per group: w_g (o/g, k) · col_g (k, ho·wo) (+ bias per row).
template <typename T>
void im2col_conv_forward(const ConvShape& s, const T* x, const T* w, const T* bias, T* out) {
  const int64_t g = s.p.groups, cg = s.c / g, og = s.o / g, k = cg * s.kh * s.kw, p = s.ho * s.wo;
  const bool pointwise = is_pointwise(s);
  parallel_for(0, s.n, batch_grain(s), [&](int64_t b, int64_t e) {
    std::vector<T> col(pointwise ? 0 : k * p);
    for (int64_t n = b; n < e; ++n)
      for (int64_t gi = 0; gi < g; ++gi) {
        const T* xg = x + (n * s.c + gi * cg) * s.h * s.w;
        if (!pointwise) im2col(s, cg, xg, col.data());
        ConstMapMat<T> cm(pointwise ? xg : col.data(), k, p);
        ConstMapMat<T> wm(w + gi * og * k, og, k);
        MapMat<T> om(out + (n * s.o + gi * og) * p, og, p);
        om.noalias() = wm * cm;
        if (bias != nullptr) om.colwise() += Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(bias + gi * og, og);
      }
  });
}

// grad_x: (n, c, h, w) = per group: col2im(w_gᵀ (k, o/g) · grad_out_g (o/g, ho·wo)).
template <typename T>
void im2col_conv_backward_input(const ConvShape& s, const T* grad_out, const T* w, T* grad_x) {
  const int64_t g = s.p.groups, cg = s.c / g, og = s.o / g, k = cg * s.kh * s.kw, p = s.ho * s.wo;
  const bool pointwise = is_pointwise(s);
  parallel_for(0, s.n, batch_grain(s), [&](int64_t b, int64_t e) {
    std::vector<T> col(pointwise ? 0 : k * p);
    for (int64_t n = b; n < e; ++n)
      for (int64_t gi = 0; gi < g; ++gi) {
        T* gx = grad_x + (n * s.c + gi * cg) * s.h * s.w;
        ConstMapMat<T> wm(w + gi * og * k, og, k);
        ConstMapMat<T> gm(grad_out + (n * s.o + gi * og) * p, og, p);
        if (pointwise) {
          MapMat<T>(gx, k, p).noalias() = wm.transpose() * gm;
        } else {
          MapMat<T> cm(col.data(), k, p);
          cm.noalias() = wm.transpose() * gm;
          std::fill(gx, gx + cg * s.h * s.w, T(0));
          col2im_add(s, cg, col.data(), gx);
        }
      }
  });
}

// grad_w: (o, cg, kh, kw) = Σ_n per group grad_out_g (o/g, ho·wo) · col_gᵀ (ho·wo, k);
// grad_bias: (o) = Σ over n, ho, wo of grad_out.
template <typename T>
void im2col_conv_backward_weight(const ConvShape& s, const T* grad_out, const T* x, T* grad_w, T* grad_bias) {
  const int64_t g = s.p.groups, cg = s.c / g, og = s.o / g, k = cg * s.kh * s.kw, p = s.ho * s.wo;
  const bool pointwise = is_pointwise(s);
  // Partial sums per chunk, added in chunk order afterwards so the result does not depend on
  // which chunk finished first.
  struct Partial {
    RowMat<T> w;
    Eigen::Matrix<T, Eigen::Dynamic, 1> b;
  };
  std::map<int64_t, Partial> partials;
  std::mutex mutex;
  parallel_for(0, s.n, batch_grain(s), [&](int64_t b, int64_t e) {
    std::vector<T> col(pointwise ? 0 : k * p);
    Partial part{RowMat<T>::Zero(s.o, k), Eigen::Matrix<T, Eigen::Dynamic, 1>::Zero(grad_bias != nullptr ? s.o : 0)};
    for (int64_t n = b; n < e; ++n)
      for (int64_t gi = 0; gi < g; ++gi) {
        const T* xg = x + (n * s.c + gi * cg) * s.h * s.w;
        if (!pointwise) im2col(s, cg, xg, col.data());
        ConstMapMat<T> cm(pointwise ? xg : col.data(), k, p);
        ConstMapMat<T> gm(grad_out + (n * s.o + gi * og) * p, og, p);
        part.w.middleRows(gi * og, og).noalias() += gm * cm.transpose();
        if (grad_bias != nullptr) part.b.segment(gi * og, og) += gm.rowwise().sum();
      }
    std::lock_guard<std::mutex> lock(mutex);
    partials.emplace(b, std::move(part));
  });
  MapMat<T> gw(grad_w, s.o, k);
  gw.setZero();
  for (const auto& [begin, part] : partials) gw += part.w;
  if (grad_bias != nullptr) {
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> gb(grad_bias, s.o);
    gb.setZero();
    for (const auto& [begin, part] : partials) gb += part.b;
  }
}

template void im2col_conv_forward<float>(const ConvShape&, const float*, const float*, const float*, float*);
template void im2col_conv_forward<double>(const ConvShape&, const double*, const double*, const double*, double*);
template void im2col_conv_backward_input<float>(const ConvShape&, const float*, const float*, float*);
template void im2col_conv_backward_input<double>(const ConvShape&, const double*, const double*, double*);
template void im2col_conv_backward_weight<float>(const ConvShape&, const float*, const float*, float*, float*);
template void im2col_conv_backward_weight<double>(const ConvShape&, const double*, const double*, double*, double*);

}  // namespace precis::cpu
