// Under AddressSanitizer the CPU caching allocator poisons what no tensor may touch: the rounding
// slack past the bytes asked for, and cached (freed) blocks. Without it ASan could not see a
// kernel reading past a tensor's end or a use of a freed tensor's memory (issue 13's sanitizer
// run). Only meaningful in an ASan build (scripts/sanitize-test.sh); elsewhere it says so.
#include <catch2/catch.hpp>

#include <cstddef>

#include "core/allocator.h"

#if defined(__SANITIZE_ADDRESS__)
#define PRECIS_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PRECIS_TEST_ASAN 1
#endif
#endif

#ifdef PRECIS_TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

using namespace precis;

TEST_CASE("cpu allocator under ASan: slack and cached blocks are poisoned", "[core][allocator]") {
#ifdef PRECIS_TEST_ASAN
  Allocator& a = cpu_allocator();
  // None is a class size, and n - 1 falls in the same class as n.
  for (size_t n : {size_t{100}, size_t{70001}, (size_t{3} << 20) + 1000}) {
    INFO(n << " bytes");
    auto* p = static_cast<char*>(a.allocate(n));
    REQUIRE(__asan_address_is_poisoned(p) == 0);
    REQUIRE(__asan_address_is_poisoned(p + n - 1) == 0);
    REQUIRE(__asan_address_is_poisoned(p + n) != 0);  // the size class is larger than n
    a.deallocate(p, n);
    REQUIRE(__asan_address_is_poisoned(p) != 0);       // cached, not freed: still poisoned
    // Reused from the cache for a request of the same class: live again up to the new size.
    auto* q = static_cast<char*>(a.allocate(n - 1));
    REQUIRE(static_cast<void*>(q) == static_cast<void*>(p));
    REQUIRE(__asan_address_is_poisoned(q + n - 2) == 0);
    REQUIRE(__asan_address_is_poisoned(q + n - 1) != 0);
    a.deallocate(q, n - 1);
  }
  a.empty_cache();
#else
  WARN("not an AddressSanitizer build: skipped (scripts/sanitize-test.sh runs it under ASan)");
#endif
}
