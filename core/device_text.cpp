// Devices as text for streams. Apart from device.cpp, whose device queries are the CUDA-dependent
// part of core; this part is the same in every build.
#include <ostream>

#include "core/device.h"

namespace precis {

std::string to_string(Device d) { return d.str(); }

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

}  // namespace precis
