#include "core/caching_allocator.h"

#include "core/error.h"

namespace precis {

void CachingAllocatorStats::freed(size_t block) {
  PRECIS_INTERNAL_ASSERT(stats_.allocated >= block, "caching allocator: freeing a block of ", block,
                         " bytes while only ", stats_.allocated, " bytes are live (double free or wrong size)");
  stats_.allocated -= block;
}

void CachingAllocatorStats::released(size_t bytes) {
  PRECIS_INTERNAL_ASSERT(stats_.reserved >= bytes, "caching allocator: releasing ", bytes, " bytes while only ",
                         stats_.reserved, " bytes are reserved");
  stats_.reserved -= bytes;
}

}  // namespace precis
