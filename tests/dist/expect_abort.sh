#!/usr/bin/env bash
# Usage: expect_abort.sh LIMIT_S MPIRUN-COMMAND...
# Passes when the command (an mpirun of abort_probe, whose last rank throws) ends within LIMIT_S
# seconds with a failure status and the injected message: an exception on one rank ends the job.
set -u
limit=$1; shift
start=$(date +%s)
out=$(timeout --kill-after=5 "$limit" "$@" 2>&1); rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
echo "expect_abort: exit status $rc after ${elapsed}s (limit ${limit}s)"
if (( rc == 124 || rc == 137 )); then echo "expect_abort: FAIL: the job hung until the ${limit}s timeout"; exit 1; fi
if (( rc == 0 )); then echo "expect_abort: FAIL: the job succeeded although a rank threw"; exit 1; fi
if ! grep -q "the failure injected on the last rank" <<<"$out"; then
  echo "expect_abort: FAIL: the failing rank's message was not printed"; exit 1
fi
echo "expect_abort: PASS: the job ended by itself"
