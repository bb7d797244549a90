#!/usr/bin/env bash
# Proves the GPU machine's strict switch: with PRECIS_REQUIRE_GPU=1 a [cuda] test that finds no
# usable device FAILS; without it the same test passes with a loud skip (the CPU-only CI).
# Any GPU is hidden (CUDA_VISIBLE_DEVICES=""), so this holds on every machine, GPU or not.
#
#   tests/gpu/strict_switch_test.sh PATH/TO/precis_cuda_tests
#
# Run by ctest (cuda.strict_gpu_switch) and by `tests/gpu/run.sh --check`.
set -uo pipefail
exe=${1:?usage: strict_switch_test.sh PATH/TO/precis_cuda_tests}
# A [cuda] test that starts with PRECIS_REQUIRE_CUDA() (tests/cuda/cuda_test.cpp).
name="host to device to host round trip keeps every dtype exactly"
fail() { echo "strict_switch_test: FAIL: $*"; exit 1; }

out=$(env -u PRECIS_REQUIRE_GPU CUDA_VISIBLE_DEVICES= "$exe" "$name" --warn NoTests 2>&1); rc=$?
echo "-- without the switch (exit $rc):"; echo "$out" | tail -5
(( rc == 0 )) || fail "without PRECIS_REQUIRE_GPU the test should pass with a skip, exit status $rc"
grep -q "no CUDA device, whole test skipped" <<<"$out" || fail "without PRECIS_REQUIRE_GPU the skip should be reported"
grep -q "test cases: 1 | 1 passed\|All tests passed" <<<"$out" || fail "the test case '$name' did not run"

out=$(PRECIS_REQUIRE_GPU=1 CUDA_VISIBLE_DEVICES= "$exe" "$name" --warn NoTests 2>&1); rc=$?
echo "-- with PRECIS_REQUIRE_GPU=1 (exit $rc):"; echo "$out" | tail -8
(( rc != 0 )) || fail "with PRECIS_REQUIRE_GPU=1 a [cuda] test without a device must fail, but it passed"
grep -q "PRECIS_REQUIRE_GPU=1: no usable CUDA device" <<<"$out" || fail "the failure should name the switch"
echo "strict_switch_test: ok (a skip without the switch, a failure with it)"
