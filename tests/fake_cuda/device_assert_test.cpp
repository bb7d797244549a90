// Index validation without a host read (ops/device_asserts.h): on the fake CUDA device a loss's
// and an embedding's forward read nothing back, and an out-of-range class or id is reported at the
// next host read (or check_device_asserts); on the CPU the same checks throw from the op at once.
#include <string>

#include "precis.h"
#include "tests/fake_cuda/fake_device.h"

using namespace precis;
using precis::fake_cuda_testing::require_fake_device;

namespace {

const Device kDev = Device::cuda(0);

// The IndexError's message, failing the test when f throws nothing.
template <typename F>
std::string index_error_of(F&& f) {
  try {
    f();
  } catch (const IndexError& e) {
    return e.what();
  }
  FAIL("expected an IndexError");
  return "";
}

}  // namespace

TEST_CASE("cross_entropy, linear_cross_entropy and embedding forwards on a device read nothing back") {
  require_fake_device();
  const Tensor logits = randn({4, 5}).to(kDev);
  const Tensor target = from_vector<int64_t>({0, 4, -100, 2}).to(kDev);
  const Tensor table = randn({10, 3}).to(kDev);
  const Tensor ids = from_vector<int64_t>({9, 0, 3}).to(kDev);
  const Tensor hidden = randn({4, 3}).to(kDev);
  cuda::HostSyncCounter c;
  const Tensor loss = cross_entropy(logits, target);
  const Tensor nll = nll_loss(log_softmax(logits, 1), target);
  const Tensor rows = embedding(ids, table);
  const Tensor picked = index_select(table, 0, ids);
  const Tensor fused = linear_cross_entropy(hidden, table.narrow(0, 0, 5), Tensor(), target);
  CHECK(c.count() == 0);
  CHECK(std::isfinite(loss.item<float>()));  // a read: one wait, and nothing to report
  CHECK(c.count() == 1);
  CHECK(rows.to(Device::cpu()).to_vector<float>() == picked.to(Device::cpu()).to_vector<float>());
  // The fused loss divides by the rows it counted on the device: the mean of the same three rows.
  const Tensor unfused = cross_entropy(linear(hidden, table.narrow(0, 0, 5)), target);
  CHECK(fused.item<float>() == Approx(unfused.item<float>()).epsilon(1e-6));
}

TEST_CASE("an out-of-range embedding id on a device is reported at the next host read, on the CPU at once") {
  require_fake_device();
  const Tensor table = randn({10, 3});
  const Tensor ids = from_vector<int64_t>({1, 12, 3});
  const std::string cpu = index_error_of([&] { (void)embedding(ids, table); });
  CHECK(cpu.find("embedding: index 12 is out of range for a table of 10 rows") != std::string::npos);

  const Tensor dev_table = table.to(kDev), dev_ids = ids.to(kDev);
  cuda::HostSyncCounter c;
  Tensor out;
  CHECK_NOTHROW(out = embedding(dev_ids, dev_table));  // no read, so no error yet
  CHECK(c.count() == 0);
  const std::string dev = index_error_of([&] { (void)sum(out).item<float>(); });
  CHECK(dev.find("embedding: index 12 is out of range for a table of 10 rows") != std::string::npos);
  CHECK(dev.find("reported at this host read") != std::string::npos);
  CHECK_NOTHROW(sum(out).item<float>());  // reported once, then cleared
}

TEST_CASE("an out-of-range class on a device gives NaN and is reported by check_device_asserts, on the CPU at once") {
  require_fake_device();
  const Tensor logits = randn({3, 5});
  const Tensor target = from_vector<int64_t>({0, 7, 1});
  const std::string cpu = index_error_of([&] { (void)cross_entropy(logits, target); });
  CHECK(cpu.find("cross_entropy: target 7 is out of range for 5 classes") != std::string::npos);

  const Tensor loss = cross_entropy(logits.to(kDev), target.to(kDev), Tensor(), -100, Reduction::none);
  const std::string dev = index_error_of([&] { check_device_asserts(kDev); });
  CHECK(dev.find("cross_entropy: target 7 is out of range for 5 classes") != std::string::npos);
  CHECK_NOTHROW(check_device_asserts(kDev));
  const std::vector<float> rows = loss.to_vector<float>();  // the bad row is NaN, the others are not
  CHECK(std::isnan(rows[1]));
  CHECK_FALSE(std::isnan(rows[0]));
  // The first failing check wins until reported.
  (void)embedding(from_vector<int64_t>({-1}).to(kDev), randn({2, 2}).to(kDev));
  (void)cross_entropy(logits.to(kDev), target.to(kDev));
  CHECK(index_error_of([&] { check_device_asserts(kDev); }).find("embedding: index -1") != std::string::npos);
}

// The composed attention (the real CUDA backend has no fused score kernel) zeroes fully masked rows
// without asking the host whether there are any: no read, and the CPU's numbers.
TEST_CASE("attention with a mask on a device reads nothing back, fully masked rows included") {
  require_fake_device();
  const bool fused = detail::set_fused_kernels(false);  // the CUDA path: matmul, softmax, matmul
  const Tensor q = randn({2, 3, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 4});
  for (bool any_empty_row : {false, true}) {
    INFO("a fully masked row: " << any_empty_row);
    Tensor keep = ones({3, 5});
    if (any_empty_row) keep.select(0, 1).fill_(0.0);  // query row 1 sees no key
    const Tensor mask = ne(keep, 0.0);
    const Tensor cpu = scaled_dot_product_attention(q, k, v, mask);
    const Tensor dq = q.to(kDev), dk = k.to(kDev), dv = v.to(kDev), dmask = mask.to(kDev);
    cuda::HostSyncCounter c;
    const Tensor dev = scaled_dot_product_attention(dq, dk, dv, dmask);
    CHECK(c.count() == 0);
    CHECK(dev.to(Device::cpu()).to_vector<float>() == cpu.to_vector<float>());
  }
  detail::set_fused_kernels(fused);
}
