#pragma once
// Host waits for CUDA devices (torch.cuda.synchronize) and the current device
// (torch.cuda.set_device), in every build.
namespace precis::cuda {

/// Blocks the host until every operation queued on CUDA device `index` (all its streams) has
/// finished; with -1, on every visible device (torch.cuda.synchronize). Needed before the host
/// reads the result of an asynchronous device-to-host copy (Tensor::to(Device::cpu(), true)).
/// With -1 and no visible device (or a build without CUDA) it returns at once; an index that is
/// not a visible device is a DeviceError.
void synchronize(int index = -1);

/// Makes CUDA device `index` the calling thread's current device (torch.cuda.set_device): where
/// work that names no device lands, such as pinned host memory's context. precis's ops run on
/// their tensors' devices whatever is current; a process that uses one GPU of several (a rank of
/// a data-parallel job) calls it first, so that no thread opens a context on cuda:0. A
/// DeviceError when `index` is not a visible device or the build has no CUDA backend.
void set_device(int index);

}  // namespace precis::cuda
