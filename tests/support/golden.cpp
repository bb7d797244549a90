#include "tests/support/golden.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "autograd/engine.h"
#include "core/error.h"

namespace precis::testing {

// ---- the flat JSON of a case's arguments -------------------------------------------------------

namespace {

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : text_(text) {}

  void expect(char c) {
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }
  bool keyword(const char* word) {
    skip_space();
    const std::string w(word);
    if (text_.compare(pos_, w.size(), w) != 0) return false;
    pos_ += w.size();
    return true;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (c == '\\') {
        if (pos_ >= text_.size()) fail("unterminated escape");
        const char e = text_[pos_++];
        c = e == 'n' ? '\n' : e == 't' ? '\t' : e;  // \" \\ \/ and the two we write
      }
      out += c;
    }
    expect('"');
    return out;
  }
  double number() {
    skip_space();
    const char* begin = text_.c_str() + pos_;
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    if (end == begin) fail("expected a number");
    pos_ += static_cast<size_t>(end - begin);
    return v;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError("golden args: " + what + " at offset " + std::to_string(pos_) + " of " + text_);
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  const std::string& text_;
  size_t pos_ = 0;
};

}  // namespace

GoldenArgs GoldenArgs::parse(const std::string& json) {
  GoldenArgs args;
  JsonReader in(json);
  in.expect('{');
  bool first = true;
  while (!in.peek('}')) {
    if (!first) in.expect(',');
    first = false;
    const std::string key = in.string();
    in.expect(':');
    Value v;
    if (in.keyword("null")) {
      v = Null{};
    } else if (in.keyword("true")) {
      v = true;
    } else if (in.keyword("false")) {
      v = false;
    } else if (in.peek('"')) {
      v = in.string();
    } else if (in.peek('[')) {
      in.expect('[');
      std::vector<double> numbers;
      std::vector<std::string> strings;
      bool item_first = true;
      while (!in.peek(']')) {
        if (!item_first) in.expect(',');
        item_first = false;
        if (in.peek('"')) {
          strings.push_back(in.string());
        } else {
          numbers.push_back(in.number());
        }
      }
      in.expect(']');
      if (!numbers.empty() && !strings.empty()) in.fail("mixed array for " + key);
      if (strings.empty()) {
        v = numbers;
      } else {
        v = strings;
      }
    } else if (in.peek('{')) {
      in.fail("nested objects are not supported (key " + key + ")");
    } else {
      v = in.number();
    }
    args.values_[key] = std::move(v);
  }
  in.expect('}');
  if (!in.at_end()) in.fail("trailing characters");
  return args;
}

const GoldenArgs::Value& GoldenArgs::at(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw ValueError("golden args: no key '" + key + "'");
  return it->second;
}

bool GoldenArgs::is_null(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() || std::holds_alternative<Null>(it->second);
}

double GoldenArgs::number(const std::string& key) const {
  const Value& v = at(key);
  if (const double* d = std::get_if<double>(&v)) return *d;
  throw ValueError("golden args: '" + key + "' is not a number");
}

int64_t GoldenArgs::integer(const std::string& key) const {
  const double d = number(key);
  if (d != std::floor(d)) throw ValueError("golden args: '" + key + "' is not an integer");
  return static_cast<int64_t>(d);
}

bool GoldenArgs::flag(const std::string& key) const {
  const Value& v = at(key);
  if (const bool* b = std::get_if<bool>(&v)) return *b;
  throw ValueError("golden args: '" + key + "' is not a boolean");
}

const std::string& GoldenArgs::text(const std::string& key) const {
  const Value& v = at(key);
  if (const std::string* s = std::get_if<std::string>(&v)) return *s;
  throw ValueError("golden args: '" + key + "' is not a string");
}

std::vector<double> GoldenArgs::numbers(const std::string& key) const {
  const Value& v = at(key);
  if (const auto* numbers = std::get_if<std::vector<double>>(&v)) return *numbers;
  if (std::holds_alternative<std::vector<std::string>>(v) && std::get<std::vector<std::string>>(v).empty()) return {};
  throw ValueError("golden args: '" + key + "' is not a list of numbers");
}

std::vector<int64_t> GoldenArgs::ints(const std::string& key) const {
  std::vector<int64_t> out;
  for (double d : numbers(key)) out.push_back(static_cast<int64_t>(d));
  return out;
}

std::vector<std::string> GoldenArgs::strings(const std::string& key) const {
  const Value& v = at(key);
  if (const auto* s = std::get_if<std::vector<std::string>>(&v)) return *s;
  if (const auto* numbers = std::get_if<std::vector<double>>(&v); numbers && numbers->empty()) return {};
  throw ValueError("golden args: '" + key + "' is not a list of strings");
}

// ---- cases -----------------------------------------------------------------------------------

Tolerance golden_tolerance(DType dtype, double f32_widen) {
  Tolerance tol = tolerance(dtype);
  if (dtype == DType::f32) {
    tol.rtol *= f32_widen;
    tol.atol *= f32_widen;
  }
  return tol;
}

Tensor GoldenCase::get(const std::string& role) const { return file->get(name + "." + role); }
bool GoldenCase::has(const std::string& role) const { return file->contains(name + "." + role); }

Tensor GoldenCase::input(const std::string& role, DType dtype) const {
  Tensor t = get(role);
  t = t.is_floating_point() ? t.to(dtype).clone() : t.clone();
  const std::vector<std::string> grads = args.strings("grads");
  for (const std::string& g : grads)
    if (g == role) t.requires_grad_(true);
  return t;
}

Tensor GoldenCase::optional_input(const std::string& role, DType dtype) const {
  return has(role) ? input(role, dtype) : Tensor();
}

double GoldenCase::torch_f32_err() const { return args.has("torch_f32_err") ? args.number("torch_f32_err") : 0.0; }

std::vector<GoldenCase> load_golden(const std::string& path) {
  auto file = std::make_shared<const SafetensorsFile>(load_safetensors(path));
  std::vector<GoldenCase> cases;
  for (const auto& [key, json] : file->metadata) {
    if (key == "generator") continue;
    cases.push_back({key, GoldenArgs::parse(json), file});
  }
  return cases;
}

void check_close(const Tensor& actual, const Tensor& expected, Tolerance tol, const std::string& what) {
  INFO(what);
  if (!actual.defined()) {
    FAIL_CHECK("undefined result");
    return;
  }
  if (!expected.is_floating_point()) {
    INFO("actual " << actual.describe() << ", expected " << expected.describe());
    CHECK(actual.sizes() == expected.sizes());
    if (actual.sizes() == expected.sizes()) CHECK(actual.to(DType::i64).to_vector<int64_t>() == expected.to(DType::i64).to_vector<int64_t>());
    return;
  }
  const std::string report = allclose_report(actual, expected, tol);
  INFO(report);
  CHECK(report.empty());
}

void check_golden_case(const GoldenCase& c, DType dtype, const GoldenRun& run, double f32_widen) {
  const std::string where = c.name + " (" + std::string(dtype_name(dtype)) + ")";
  INFO("golden case " << where << "; PyTorch's own f32 error: " << c.torch_f32_err() << "x the f32 tolerance");
  const Tolerance tol = golden_tolerance(dtype, f32_widen);
  std::map<std::string, Tensor> inputs;
  for (const std::string& role : c.args.strings("inputs")) inputs[role] = c.input(role, dtype);
  GoldenOutputs outputs = run(c, inputs);

  for (const std::string& role : c.args.strings("outputs")) {
    auto it = outputs.find(role);
    if (it == outputs.end()) {
      FAIL_CHECK(where << ": the run returned no '" << role << "'");
      continue;
    }
    if (it->second.defined() && it->second.is_floating_point()) CHECK(it->second.dtype() == dtype);
    check_close(it->second, c.get(role), tol, where + ": " + role);
  }

  const std::vector<std::string> grads = c.args.strings("grads");
  if (grads.empty()) return;
  autograd::TensorList wrt;
  for (const std::string& g : grads) wrt.push_back(inputs.at(g));
  const Tensor out = outputs.at("out");
  REQUIRE(out.requires_grad());
  const autograd::TensorList got = autograd::grad({out}, wrt, {c.get("grad_out").to(dtype)});
  for (size_t i = 0; i < grads.size(); ++i) check_close(got[i], c.get("grad." + grads[i]), tol, where + ": grad." + grads[i]);
}

void check_golden_file(const std::string& path, const GoldenRun& run, double f32_widen) {
  const std::vector<GoldenCase> cases = load_golden(path);
  REQUIRE(!cases.empty());
  for (const GoldenCase& c : cases) {
    check_golden_case(c, DType::f64, run, f32_widen);
    check_golden_case(c, DType::f32, run, f32_widen);
  }
}

StateDict load_golden_dict(const std::string& path) {
  StateDict d;
  for (auto& [k, t] : load_safetensors(path).tensors) d[k] = t;
  return d;
}

void require_golden_close(const Tensor& actual, const Tensor& expected, DType dtype, const std::string& what,
                          double f32_widen) {
  REQUIRE(actual.defined());
  const std::string report = allclose_report(actual.to(DType::f64), expected, golden_tolerance(dtype, f32_widen));
  INFO(what << " (" << dtype_name(dtype) << "): " << report);
  REQUIRE(report.empty());
}

}  // namespace precis::testing
