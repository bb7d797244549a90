#pragma once
// Golden-value tests: reading the fixtures tests/golden/gen_fixtures.py wrote with PyTorch and
// comparing precis's outputs and gradients with them.
//
// An op fixture file holds several cases. Case "c" has tensors "c.<role>" (inputs under their
// PyTorch argument names, "out" and further outputs, "grad_out", "grad.<input>") and a metadata
// entry "c" with the call's arguments as a flat JSON object (numbers, strings, booleans, null and
// arrays of numbers or strings). The reference values are f64; the inputs are exactly
// representable in f32, so one case is run in f64 and in f32 against the same reference.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "tensor/safetensors.h"
#include "tensor/state_dict.h"
#include "tests/support/paths.h"
#include "tests/support/tensor_testing.h"

namespace precis::testing {

/// A flat JSON object: the arguments of one golden case.
class GoldenArgs {
 public:
  /// Parses `{"k": 1, "s": "x", "b": true, "n": null, "v": [1, 2]}`; throws ValueError otherwise.
  static GoldenArgs parse(const std::string& json);

  bool has(const std::string& key) const { return values_.count(key) != 0; }
  /// True when the key is absent or null.
  bool is_null(const std::string& key) const;
  double number(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  bool flag(const std::string& key) const;
  const std::string& text(const std::string& key) const;
  std::vector<int64_t> ints(const std::string& key) const;
  std::vector<double> numbers(const std::string& key) const;
  std::vector<std::string> strings(const std::string& key) const;

 private:
  struct Null {};
  using Value = std::variant<Null, double, bool, std::string, std::vector<double>, std::vector<std::string>>;
  const Value& at(const std::string& key) const;
  std::map<std::string, Value> values_;
};

/// Tolerance of a golden comparison: the table's tolerance for `dtype`; for f32 multiplied by
/// `f32_widen`. Widen only for ops whose outputs are long sums with cancellation (convolution,
/// attention, whole blocks): there even PyTorch's own f32 result misses the plain f32 tolerance
/// against the f64 reference (the fixture's "torch_f32_err" records by how much).
Tolerance golden_tolerance(DType dtype, double f32_widen = 1.0);

/// One case of a fixture file.
struct GoldenCase {
  std::string name;
  GoldenArgs args;
  std::shared_ptr<const SafetensorsFile> file;

  /// The stored tensor "<name>.<role>" (as written: f64 references, i64/bool indices and masks).
  Tensor get(const std::string& role) const;
  bool has(const std::string& role) const;
  /// The input `role` for a run in `dtype`: floating tensors cast to dtype, others as stored;
  /// a fresh leaf that requires grad when role is listed in the case's "grads".
  Tensor input(const std::string& role, DType dtype) const;
  /// input(role, dtype), or an undefined tensor when the case has no such input.
  Tensor optional_input(const std::string& role, DType dtype) const;
  /// Worst error of PyTorch's own f32 run, in units of the f32 tolerance (from the metadata).
  double torch_f32_err() const;
};

/// The cases of an op fixture file (in metadata key order).
std::vector<GoldenCase> load_golden(const std::string& path);

/// Outputs of one run of a case, by role ("out", "indices", "running_mean_after", ...).
using GoldenOutputs = std::map<std::string, Tensor>;
/// Runs the op under test for one case: receives the inputs by role (already prepared with
/// GoldenCase::input for the run's dtype) and returns the outputs.
using GoldenRun = std::function<GoldenOutputs(const GoldenCase&, std::map<std::string, Tensor>&)>;

/// Runs `run` for the case in `dtype` and CHECKs every stored output and every stored gradient
/// (d(sum(out * grad_out)) / d(input), through precis's autograd) against the fixture. Integer
/// outputs compare exactly. Failures name the case, dtype and tensor.
void check_golden_case(const GoldenCase& c, DType dtype, const GoldenRun& run, double f32_widen = 1.0);

/// check_golden_case for every case of the file, in f64 and in f32.
void check_golden_file(const std::string& path, const GoldenRun& run, double f32_widen = 1.0);

/// CHECKs actual ≈ expected (a reference tensor of any dtype) under `tol`, naming `what`.
void check_close(const Tensor& actual, const Tensor& expected, Tolerance tol, const std::string& what);

/// Every tensor of a whole-module fixture file (tests/golden/gen_model_fixtures.py and
/// gen_layer_fixtures.py: "state.<name>", "input", "out", "grad.<name>", ...) by name.
StateDict load_golden_dict(const std::string& path);

/// REQUIREs actual (any floating dtype, computed in `dtype`) ≈ the f64 reference `expected` under
/// golden_tolerance(dtype, f32_widen), naming `what` and the dtype.
void require_golden_close(const Tensor& actual, const Tensor& expected, DType dtype, const std::string& what,
                          double f32_widen);

}  // namespace precis::testing
