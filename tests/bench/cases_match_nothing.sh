#!/usr/bin/env bash
# Usage: cases_match_nothing.sh PRECIS_BENCH
# A --cases pattern that matches none of a suite's cases (a typo) fails with exit status 2,
# naming the pattern and listing the suite's case names, instead of printing an empty table and
# exiting 0; a pattern that matches still measures.
set -u
bench=$1
out=$("$bench" ops --no-peak --threads 1 --repeat 1 --min-time 0 --cases no-such-case 2>&1); code=$?
echo "$out"
fail() { echo "cases_match_nothing: FAIL: $*"; exit 1; }
(( code == 2 )) || fail "exit status $code, expected 2"
grep -q "^precis-bench: --cases 'no-such-case' matches none of the ops suite's cases" <<<"$out" || fail "no message naming the pattern"
grep -q "^  softmax 16x4x128x128 f32$" <<<"$out" || fail "the case names are not listed"
grep -q "^| " <<<"$out" && fail "a table was printed"
out=$("$bench" ops --no-peak --threads 1 --repeat 1 --min-time 0 --cases "softmax 16x4x128x128" 2>&1); code=$?
echo "$out"
(( code == 0 )) || fail "a matching pattern exited with $code"
grep -q "^| softmax 16x4x128x128 | f32 | 1 |" <<<"$out" || fail "the matching case was not measured"
echo "cases_match_nothing: PASS"
