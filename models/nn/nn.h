#pragma once
// The nn umbrella header: Module and every layer. Light (no Eigen/oneDNN/CUDA includes).
#include "models/nn/activation.h"
#include "models/nn/attention.h"
#include "models/nn/conv.h"
#include "models/nn/embedding.h"
#include "models/nn/fp8.h"
#include "models/nn/init.h"
#include "models/nn/linear.h"
#include "models/nn/module.h"
#include "models/nn/norm.h"
#include "models/nn/sequential.h"
#include "models/nn/transformer.h"
