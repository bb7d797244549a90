#pragma once
// Host waits for CUDA devices (torch.cuda.synchronize), in every build.
namespace precis::cuda {

/// Blocks the host until every operation queued on CUDA device `index` (all its streams) has
/// finished; with -1, on every visible device (torch.cuda.synchronize). Needed before the host
/// reads the result of an asynchronous device-to-host copy (Tensor::to(Device::cpu(), true)).
/// With -1 and no visible device (or a build without CUDA) it returns at once; an index that is
/// not a visible device is a DeviceError.
void synchronize(int index = -1);

}  // namespace precis::cuda
