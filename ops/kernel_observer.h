#pragma once
// A hook on the kernel registry's lookups (ops/op_table.h), for tests that record which kernels a
// workload needs (tests/models/cuda_coverage_test.cpp). Internal: not part of the public API.
#include "core/device.h"
#include "core/dtype.h"
#include "ops/op_table.h"

namespace precis {

/// Called with every (op, device, dtype) that kernel<Fn>() looks up while installed (find_kernel
/// does not call it), maybe from several threads at once.
using KernelLookupObserver = void (*)(OpId op, DeviceType device, DType dtype);
/// Installs `observer` (nullptr: none). Change it only while no op runs.
void set_kernel_lookup_observer(KernelLookupObserver observer);

}  // namespace precis
