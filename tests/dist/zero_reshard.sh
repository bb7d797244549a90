#!/usr/bin/env bash
# Usage: zero_reshard.sh PRECIS_DIST_TESTS WORKDIR MPIRUN-COMMAND... (ending in its -n flag)
# A ZeroOptimizer state saved at np 2 resumes at np 3 and in a single process (no mpirun): its
# state dict comes back bit for bit, and the continuation equals plain DDP resumed from the same
# file at that world size (zero_test.cpp, "a state saved at one world size resumes at another").
set -u
tests=$1 work=$2; shift 2
rm -rf "$work" && mkdir -p "$work" || exit 1
export PRECIS_ZERO_RESHARD_DIR=$work
run() { echo "+ $*"; "$@" || { echo "zero_reshard: FAIL"; exit 1; }; }
PRECIS_ZERO_RESHARD=save run "$@" 2 -x PRECIS_ZERO_RESHARD -x PRECIS_ZERO_RESHARD_DIR "$tests" "[.zero_reshard]"
PRECIS_ZERO_RESHARD=resume run "$@" 3 -x PRECIS_ZERO_RESHARD -x PRECIS_ZERO_RESHARD_DIR "$tests" "[.zero_reshard]"
PRECIS_ZERO_RESHARD=resume run "$tests" "[.zero_reshard]"
echo "zero_reshard: PASS"
