#pragma once
// Mixed precision: autocast (the per-op precision policy), the loss scaler and the audit.
#include "amp/audit.h"
#include "amp/autocast.h"
#include "amp/fp8_linear.h"
#include "amp/fp8_recipe.h"
#include "amp/fp8_scaling.h"
#include "amp/grad_scaler.h"
