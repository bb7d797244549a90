#pragma once
// What both IDX harnesses (fuzz_idx, fuzz_idx_gzip) do with the file they wrote: every IDX entry
// point on it (the array as a tensor, then the image and label readers), where a precis::Error is
// the expected answer to bad bytes and anything else (a crash, a sanitizer report, another
// exception) is a finding.
#include <string>

#include "core/error.h"
#include "data/idx.h"

namespace precis::fuzz {

inline void read_idx_every_way(const std::string& path) {
  try {
    precis::data::IdxArray a = precis::data::read_idx(path);
    (void)precis::data::idx_to_tensor(a);
  } catch (const precis::Error&) {
  }
  try {
    (void)precis::data::read_idx_images(path);
  } catch (const precis::Error&) {
  }
  try {
    (void)precis::data::read_idx_labels(path);
  } catch (const precis::Error&) {
  }
}

}  // namespace precis::fuzz
