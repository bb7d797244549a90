#pragma once
// The optimizer API in one include: optimizers, LR schedulers, gradient clipping and
// accumulation (docs/optimizers.md).
#include "optim/accumulation.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
