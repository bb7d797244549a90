// Uses precis as a user would: through the umbrella header once there is one, else a core header.
//
//   consumer          prints a dtype's name (the library links and runs)
//   consumer --cuda   asks for a tensor on cuda:0 and prints what happened: "cuda: ok" on a machine
//                     with a GPU, else "cuda: DeviceError: <why>". Exit 0 for either; 1 for any other
//                     exception or an empty message: a missing GPU must be one clear error.
#include <precis/precis.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--cuda") {
    try {
      const precis::Tensor t = precis::zeros({2}, {.device = precis::Device::cuda(0)});
      std::cout << "cuda: ok (" << t.device().str() << ")\n";
      return 0;
    } catch (const precis::DeviceError& e) {
      std::cout << "cuda: DeviceError: " << e.what() << "\n";
      return std::string(e.what()).empty() ? 1 : 0;
    } catch (const std::exception& e) {
      std::cout << "cuda: unexpected " << e.what() << "\n";
      return 1;
    }
  }
  std::cout << "consumer: included <precis/precis.h>\n";
  std::cout << "dtype_name(DType::bf16) = " << precis::dtype_name(precis::DType::bf16) << "\n";
  return precis::dtype_name(precis::DType::bf16) == std::string("bf16") ? 0 : 1;
}
