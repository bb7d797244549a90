// load_state_dict_file on a fuzzed file, loaded into a real module, Adam optimizer, StepLR
// schedule and GradScaler (fuzz/training_state.h), which then take a step.
#include "core/error.h"
#include "fuzz/common.h"
#include "fuzz/training_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precis::fuzz::init_once();
  const std::string& path = precis::fuzz::write_temp(data, size, ".safetensors");
  precis::StateDict dict;
  try {
    dict = precis::load_state_dict_file(path);
  } catch (const precis::Error&) {
    return 0;
  }
  precis::fuzz::load_training_state(dict);
  return 0;
}
