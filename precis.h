#pragma once
// The umbrella header: `#include <precis/precis.h>` gives the whole public API. It includes no
// Eigen, oneDNN or CUDA header, so it stays cheap to compile.
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "core/warning.h"
#include "ops/functional.h"
#include "optim/optim.h"
#include "amp/amp.h"
#include "tensor/factory.h"
#include "tensor/tensor.h"
