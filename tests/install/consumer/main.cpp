// Uses precis as a user would: through the umbrella header once there is one, else a core header.
#if __has_include(<precis/precis.h>)
#include <precis/precis.h>
#define PRECIS_CONSUMER_HEADER "<precis/precis.h>"
#else
#include "core/dtype.h"
#define PRECIS_CONSUMER_HEADER "\"core/dtype.h\""
#endif

#include <iostream>

int main() {
  std::cout << "consumer: included " << PRECIS_CONSUMER_HEADER << "\n";
  std::cout << "dtype_name(DType::bf16) = " << precis::dtype_name(precis::DType::bf16) << "\n";
  return precis::dtype_name(precis::DType::bf16) == "bf16" ? 0 : 1;
}
