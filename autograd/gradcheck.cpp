// Gradient checking. Two modes:
//  - full Jacobian (small problems): every entry of d(outputs)/d(inputs), analytic rows from one
//    backward per output element (one-hot gradient), numeric columns from central differences per
//    input element;
//  - random directions (larger problems): for random output weights w and input directions v,
//    compare <grad of (w·outputs), v> with the central difference of w·outputs along v.
#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "tensor/factory.h"

namespace precis::autograd {

namespace {

// Element offsets (in elements, from the storage start) of t in row-major order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offs;
  offs.reserve(static_cast<size_t>(t.numel()));
  const Shape& sz = t.sizes();
  const Shape& st = t.strides();
  Shape idx(sz.size(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = t.storage_offset();
    for (size_t d = 0; d < sz.size(); ++d) off += idx[d] * st[d];
    offs.push_back(off);
    for (size_t d = sz.size(); d-- > 0;) {
      if (++idx[d] < sz[d]) break;
      idx[d] = 0;
    }
  }
  return offs;
}

double* storage_base(const Tensor& t) { return static_cast<double*>(t.storage()->data()); }

std::vector<double> flat_outputs(const TensorList& outs) {
  std::vector<double> v;
  for (const Tensor& o : outs) {
    if (!o.defined() || !is_floating(o.dtype())) continue;
    auto x = o.to_vector<double>();
    v.insert(v.end(), x.begin(), x.end());
  }
  return v;
}

bool close(double analytic, double numeric, const GradcheckOptions& o) {
  if (std::isnan(analytic) || std::isnan(numeric)) return false;
  return std::fabs(analytic - numeric) <= o.atol + o.rtol * std::fabs(numeric);
}

std::string mismatch(const std::string& what, double analytic, double numeric) {
  std::ostringstream os;
  os.precision(12);
  os << what << ": analytic " << analytic << " vs numeric " << numeric;
  return os.str();
}

}  // namespace

GradcheckResult gradcheck(const std::function<TensorList(const TensorList&)>& fn, const TensorList& inputs,
                          const GradcheckOptions& options) {
  std::vector<size_t> checked;
  std::vector<std::vector<int64_t>> offsets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    PRECIS_CHECK_DTYPE(x.dtype() == DType::f64 && x.device().is_cpu(), "gradcheck: input ", i, " is ", x.describe(),
                       "; gradcheck needs f64 CPU inputs");
    for (size_t d = 0; d < x.strides().size(); ++d)
      PRECIS_CHECK(x.strides()[d] != 0 || x.sizes()[d] <= 1, "gradcheck: input ", i, " ", x.describe(),
                   " has overlapping elements (an expanded view); perturbing one would move several");
    checked.push_back(i);
    offsets.push_back(element_offsets(x));
  }
  PRECIS_CHECK(!checked.empty(), "gradcheck: no input requires grad");

  TensorList outs = fn(inputs);
  TensorList diff_outs;
  for (const Tensor& o : outs)
    if (o.defined() && is_floating(o.dtype()) && o.requires_grad()) diff_outs.push_back(o);
  PRECIS_CHECK(!diff_outs.empty(), "gradcheck: no output requires grad (the op recorded no backward)");
  int64_t out_numel = 0;
  for (const Tensor& o : diff_outs) out_numel += o.numel();
  int64_t in_numel = 0;
  TensorList checked_inputs;
  for (size_t k : checked) {
    in_numel += inputs[k].numel();
    checked_inputs.push_back(inputs[k]);
  }

  // Numeric derivative of sum_j w_j · out_j(x) along the perturbation applied by `perturb(sign)`.
  auto weighted_output = [&](const std::vector<double>& w) {
    NoGradGuard no_grad;
    std::vector<double> v = flat_outputs(fn(inputs));
    double s = 0;
    for (size_t j = 0; j < v.size() && j < w.size(); ++j) s += w[j] * v[j];
    return s;
  };
  const double eps = options.eps;

  GradcheckResult result;
  const bool full = in_numel <= options.full_jacobian_max_numel && out_numel <= options.full_jacobian_max_numel;
  if (full) {
    // Analytic Jacobian: row r (output element r) from one backward with a one-hot gradient.
    std::vector<std::vector<double>> jac(static_cast<size_t>(out_numel));
    int64_t r = 0;
    for (size_t oi = 0; oi < diff_outs.size(); ++oi) {
      for (int64_t e = 0; e < diff_outs[oi].numel(); ++e, ++r) {
        TensorList gouts;
        for (size_t oj = 0; oj < diff_outs.size(); ++oj) {
          std::vector<double> g(static_cast<size_t>(diff_outs[oj].numel()), 0.0);
          if (oj == oi) g[static_cast<size_t>(e)] = 1.0;
          gouts.push_back(from_vector<double>(g, diff_outs[oj].sizes()));
        }
        TensorList gins = grad(diff_outs, checked_inputs, gouts, /*retain_graph=*/true, /*allow_unused=*/true);
        for (size_t k = 0; k < gins.size(); ++k) {
          std::vector<double> gv = gins[k].defined() ? gins[k].to_vector<double>()
                                                     : std::vector<double>(checked_inputs[k].numel(), 0.0);
          jac[r].insert(jac[r].end(), gv.begin(), gv.end());
        }
      }
    }
    // Numeric Jacobian, column by column.
    int64_t col = 0;
    for (size_t k = 0; k < checked.size(); ++k) {
      double* base = storage_base(inputs[checked[k]]);
      for (size_t e = 0; e < offsets[k].size(); ++e, ++col) {
        double& x = base[offsets[k][e]];
        const double orig = x;
        std::vector<double> plus, minus;
        {
          NoGradGuard no_grad;
          x = orig + eps;
          plus = flat_outputs(fn(inputs));
          x = orig - eps;
          minus = flat_outputs(fn(inputs));
          x = orig;
        }
        for (int64_t row = 0; row < out_numel; ++row) {
          const double numeric = (plus[row] - minus[row]) / (2 * eps);
          const double analytic = jac[row][col];
          if (!close(analytic, numeric, options)) {
            std::ostringstream what;
            what << "d output[" << row << "] / d input " << checked[k] << "[" << e << "]";
            return {false, mismatch(what.str(), analytic, numeric)};
          }
        }
      }
    }
    return result;
  }

  Generator gen(options.seed + 12345);
  for (int d = 0; d < options.num_random_directions; ++d) {
    // Random output weights and input direction.
    TensorList gouts;
    std::vector<double> w;
    for (const Tensor& o : diff_outs) {
      Tensor g = randn(o.sizes(), {.dtype = DType::f64}, &gen);
      auto gv = g.to_vector<double>();
      w.insert(w.end(), gv.begin(), gv.end());
      gouts.push_back(g);
    }
    std::vector<std::vector<double>> dirs;
    for (size_t k = 0; k < checked.size(); ++k) dirs.push_back(randn({static_cast<int64_t>(offsets[k].size())},
                                                                    {.dtype = DType::f64}, &gen).to_vector<double>());
    TensorList gins = grad(diff_outs, checked_inputs, gouts, /*retain_graph=*/true, /*allow_unused=*/true);
    double analytic = 0;
    for (size_t k = 0; k < gins.size(); ++k) {
      if (!gins[k].defined()) continue;
      auto gv = gins[k].to_vector<double>();
      for (size_t e = 0; e < gv.size(); ++e) analytic += gv[e] * dirs[k][e];
    }
    std::vector<std::vector<double>> orig(checked.size());
    for (size_t k = 0; k < checked.size(); ++k) {
      double* base = storage_base(inputs[checked[k]]);
      for (int64_t off : offsets[k]) orig[k].push_back(base[off]);
    }
    auto shift = [&](double scale) {  // x = orig + scale·v (scale 0 restores exactly)
      for (size_t k = 0; k < checked.size(); ++k) {
        double* base = storage_base(inputs[checked[k]]);
        for (size_t e = 0; e < offsets[k].size(); ++e) base[offsets[k][e]] = orig[k][e] + scale * dirs[k][e];
      }
    };
    shift(eps);
    const double fp = weighted_output(w);
    shift(-eps);
    const double fm = weighted_output(w);
    shift(0.0);
    const double numeric = (fp - fm) / (2 * eps);
    if (!close(analytic, numeric, options)) {
      std::ostringstream what;
      what << "directional derivative " << d;
      return {false, mismatch(what.str(), analytic, numeric)};
    }
  }
  return result;
}

}  // namespace precis::autograd
