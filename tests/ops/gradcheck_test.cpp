// Runs every registered gradient-check case (tests/support/op_cases.h) through gradcheck, and
// checks that the graph it builds really contains a node of the op under test.
#include <unordered_set>

#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "tests/support/op_cases.h"
#include "tests/support/tensor_testing.h"

namespace precis::testing {
namespace {

// True when op's node is reachable from any output's grad_fn.
bool graph_contains(const TensorList& outputs, OpId op) {
  std::vector<autograd::Node*> stack;
  std::unordered_set<autograd::Node*> seen;
  for (const Tensor& o : outputs)
    if (o.defined() && o.grad_fn()) stack.push_back(o.grad_fn().get());
  while (!stack.empty()) {
    autograd::Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (n->has_op() && n->op() == op) return true;
    for (const auto& e : n->next_edges())
      if (e.valid()) stack.push_back(e.fn.get());
  }
  return false;
}

// [cuda]: with a GPU present the registry holds to_device's case (cpu to cuda and back,
// view_grad_test.cpp), which runs on the device.
TEST_CASE("every registered op case passes gradcheck in f64", "[grad][ops][cuda]") {
  REQUIRE_FALSE(grad_cases().empty());
  const bool gpu = PRECIS_CUDA_PART("to_device's gradient check, cpu to cuda and back");
  bool to_device_case = false;
  for (const GradCase& c : grad_cases()) to_device_case |= c.op == OpId::to_device;
  CHECK(to_device_case == gpu);  // registered exactly where a device is present
  for (const GradCase& c : grad_cases()) {
    DYNAMIC_SECTION(op_name(c.op) << ": " << c.label) {
      TensorList inputs = c.inputs();
      const OpInfo& info = op_info(c.op);
      if (info.kind != OpKind::Composite) {
        TensorList outs = c.fn(inputs);
        INFO("the case's graph must contain a " << op_name(c.op) << " node");
        CHECK(graph_contains(outs, c.op));
      }
      autograd::GradcheckResult r = autograd::gradcheck(c.fn, inputs, c.options);
      INFO(r.message);
      CHECK(r.ok);
    }
  }
}

}  // namespace
}  // namespace precis::testing
