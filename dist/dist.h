#pragma once
// Data-parallel training: the process group and its collectives, DistributedDataParallel, ZeroOptimizer
// and the distributed batch sampler (docs/distributed.md). No MPI header: the backend is behind the API.
#include "dist/ddp.h"
#include "dist/process_group.h"
#include "dist/sampler.h"
#include "dist/zero.h"
