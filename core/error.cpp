#include "core/error.h"

namespace precis::detail {

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw InternalError(str_cat("internal error at ", file, ":", line, ": ", cond, " failed",
                              msg.empty() ? "" : ": ", msg,
                              ". This is a bug in precis; please report it with this message."));
}

}  // namespace precis::detail
