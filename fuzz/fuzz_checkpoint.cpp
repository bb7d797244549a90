// load_checkpoint (models/train/checkpoint.h: safetensors plus CRC-32 and count metadata) on a
// fuzzed file, then its state loaded into a real module, optimizer, schedule and scaler.
#include "core/error.h"
#include "fuzz/common.h"
#include "fuzz/training_state.h"
#include "models/train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precis::fuzz::init_once();
  // The name a checkpoint has, so that the reader's error path lists its folder's siblings too.
  const std::string& path = precis::fuzz::write_temp(data, size, "-step-000000001.safetensors");
  precis::train::Checkpoint ckpt;
  try {
    ckpt = precis::train::load_checkpoint(path);
  } catch (const precis::Error&) {
    return 0;
  }
  precis::fuzz::load_training_state(ckpt.state);
  return 0;
}
