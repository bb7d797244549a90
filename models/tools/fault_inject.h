#pragma once
// precis-train's test seam for checkpoint fault injection (tests/models/train_kill_test.cpp):
// the environment variable PRECIS_FAULT_INJECT installs tensor/file_io.h's fault hook, counting
// the process's file operations (create, write, fsync, close, rename, open_dir, fsync_dir, remove
// of checkpoint files) from 1:
//
//   PRECIS_FAULT_INJECT=trace        print "precis-train: file op N: <op> <path>" to stderr for each
//   PRECIS_FAULT_INJECT=kill@N       SIGKILL this process just before file operation N
//   PRECIS_FAULT_INJECT=ENOSPC@N     make operation N fail with that errno (also EIO, EROFS, EACCES,
//                                    EDQUOT), as the system would
//
// Not for production use; unset, it costs nothing.
#include <string>

namespace precis::train {

/// Installs the hook PRECIS_FAULT_INJECT describes. Returns an error message for a malformed value
/// (empty when it is unset or valid).
std::string install_fault_injection_from_env();

}  // namespace precis::train
