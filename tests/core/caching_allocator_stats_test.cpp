// The statistics bookkeeping shared by the CPU and CUDA caching allocators
// (core/caching_allocator.h), tested on its own so the CUDA allocator's counters are covered
// without a GPU.
#include <catch2/catch.hpp>

#include "core/caching_allocator.h"
#include "core/error.h"

using namespace precis;

TEST_CASE("caching allocator stats: requests, hits, live, reserved and peak", "[core][allocator]") {
  CachingAllocatorStats book;
  book.count_request();
  book.fresh_block(1024);  // miss: new block from the system
  book.count_request();
  book.fresh_block(512);
  AllocatorStats s = book.get();
  CHECK(s.num_allocs == 2);
  CHECK(s.num_cache_hits == 0);
  CHECK(s.allocated == 1536);
  CHECK(s.reserved == 1536);
  CHECK(s.peak_allocated == 1536);

  book.freed(1024);  // back to the cache: still reserved, no longer live
  s = book.get();
  CHECK(s.allocated == 512);
  CHECK(s.reserved == 1536);
  CHECK(s.peak_allocated == 1536);

  book.count_request();
  book.cache_hit(1024);  // served from the cache: reserved unchanged
  s = book.get();
  CHECK(s.num_allocs == 3);
  CHECK(s.num_cache_hits == 1);
  CHECK(s.allocated == 1536);
  CHECK(s.reserved == 1536);

  book.freed(1024);
  book.reset_peak();
  CHECK(book.get().peak_allocated == 512);
  book.released(1024);
  CHECK(book.get().reserved == 512);
}

TEST_CASE("caching allocator stats: freeing or releasing more than is held is an InternalError", "[core][allocator]") {
  CachingAllocatorStats book;
  book.count_request();
  book.fresh_block(512);
  CHECK_THROWS_AS(book.freed(1024), InternalError);
  CHECK(book.get().allocated == 512);  // unchanged by the refused call
  book.freed(512);
  CHECK_THROWS_AS(book.freed(512), InternalError);  // a double free
  CHECK_THROWS_AS(book.released(4096), InternalError);
  CHECK(book.get().reserved == 512);
}
