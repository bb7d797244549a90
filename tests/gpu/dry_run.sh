#!/usr/bin/env bash
# The GPU check's own verdicts, proved without a GPU: tests/gpu/run.sh's GPU side runs against a
# fake GPU layer (nvidia-smi, compute-sanitizer, the test executables, precis-train, precis-bench
# and the PyTorch peer as small scripts), once clean and once with one fault in each kind of step:
#
#   no_tests      a test executable whose [cuda] filter matches nothing   -> that row FAIL
#   test_fails    a test executable that reports a failed test case         -> that row FAIL
#   empty_csv     precis-train writes a metrics CSV with no rows            -> the ResNet row FAIL
#   crash_verdict precis-train writes a loss that is not a number           -> the BERT rows FAIL
#   memcheck      compute-sanitizer reports an error                        -> the memcheck row FAIL
#   timeout       precis-bench runs past its limit                          -> its row TIMEOUT
#
# The clean run must pass with every row ok; the faulty one must exit 1 with exactly those rows
# failed. Run by `tests/gpu/run.sh --check` (CI) and `tests/gpu/run.sh --dry-run`.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
fake=$(mktemp -d /tmp/precis-gpu-dry.XXXX)
trap '[[ -n "${KEEP_FAKE:-}" ]] || rm -rf "$fake"' EXIT
mkdir -p "$fake/bin" "$fake/tools" "$fake/carry/fashion-mnist" "$fake/carry/text"
fail() { echo "dry_run: FAIL: $*"; exit 1; }

# The test executables the real bundle holds: one fake per tests/<folder> with a [cuda] tag.
mapfile -t tests < <(grep -rl --include='*.cpp' '"[^"]*\[cuda\][^"]*"' tests | cut -d/ -f2 | sort -u | grep -vx dist |
                     sed 's/.*/precis_&_tests/')
(( ${#tests[@]} > 0 )) || fail "no test folder holds a [cuda] test"
# The faults hit a test executable run with the [cuda] filter (precis_cuda_tests runs whole).
faulty_test=$(printf '%s\n' "${tests[@]}" | grep -vx precis_cuda_tests | head -1)
[[ -n "$faulty_test" ]] || fail "no test executable besides precis_cuda_tests holds a [cuda] test"
for t in "${tests[@]}"; do
  cat >"$fake/bin/$t" <<EOF
#!/usr/bin/env bash
# A fake Catch2 executable: lists two test cases, runs them.
me=$t
EOF
  cat >>"$fake/bin/$t" <<'EOF'
faults=" ${FAKE_FAULTS:-} "
[[ "$1" == --help ]] && exit 0
if [[ "$1" == --list-test-names-only ]]; then
  [[ "$faults" == *" no_tests "* && "$me" == "$FAKE_FAULTY_TEST" ]] && exit 0
  printf 'first test\nsecond test\n'; exit 2
fi
[[ -n "${PRECIS_REQUIRE_GPU:-}" ]] || { echo "PRECIS_REQUIRE_GPU is not set"; exit 3; }
if [[ "$faults" == *" test_fails "* && "$me" == "$FAKE_FAULTY_TEST" ]]; then
  echo "test cases: 2 | 1 passed | 1 failed"; exit 1
fi
echo "All tests passed (10 assertions in 2 test cases)"
EOF
done
cat >"$fake/bin/precis-train" <<'EOF'
#!/usr/bin/env bash
# A fake precis-train: 20 (CPU: --stop-after-steps) falling losses in the --metrics CSV.
faults=" ${FAKE_FAULTS:-} "; task=$1; metrics="" steps=20
[[ "$1" == --help ]] && exit 0
while (( $# )); do
  case "$1" in --metrics) metrics=$2; shift ;; --stop-after-steps) steps=$2; shift ;; esac; shift
done
echo "epoch,step,epoch_step,lr,loss" >"$metrics"
[[ "$task" == resnet && "$faults" == *" empty_csv "* ]] && exit 0
for ((i = 1; i <= steps; i++)); do
  loss=$(awk -v i="$i" 'BEGIN { printf "%.4f", 2.3 / (1 + 0.05 * i) }')
  [[ "$task" == bert-mini && "$faults" == *" crash_verdict "* && $i == 3 ]] && loss=garbled
  echo "1,$i,$i,0.1,$loss" >>"$metrics"
done
EOF
cat >"$fake/bin/precis-bench" <<'EOF'
#!/usr/bin/env bash
# A fake precis-bench: one JSON record (or, with the timeout fault, a hang).
[[ "$1" == --help ]] && exit 0
[[ " ${FAKE_FAULTS:-} " == *" timeout "* ]] && sleep 60
json=""
while (( $# )); do
  [[ "$1" == --json ]] && json=$2
  [[ "$1" == --profile ]] && echo "ops: 95.0 ms of 100.0 ms wall (95.0%; device clock 95.0 ms, wall clock 0.0 ms)"
  shift
done
[[ -n "$json" ]] || exit 0
echo '[{"suite": "models", "case": "resnet50 b256 224", "dtype": "f16", "impl": "precis", "threads": 16, "variant": "f16-amp-nchw", "median_ms": 50.0, "min_ms": 49.0, "gflops": 0, "device": "cuda:0", "images_per_s": 5120, "peak_device_mb": 9000, "peak_device_mb_steps": 8500}]' >"$json"
EOF
cat >"$fake/tools/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
echo "Fake H200 (dry run), 580.00, 143771 MiB, 9.0"
EOF
cat >"$fake/tools/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
# A fake compute-sanitizer: runs the program after its options, then reports.
while [[ "$1" == --* ]]; do [[ "$1" == --tool || "$1" == --error-exitcode || "$1" == --leak-check ]] && shift; shift; done
"$@" || exit $?
if [[ " ${FAKE_FAULTS:-} " == *" memcheck "* ]]; then echo "========= ERROR SUMMARY: 1 error"; exit 99; fi
echo "========= ERROR SUMMARY: 0 errors"
EOF
cat >"$fake/tools/torch-python" <<'EOF'
#!/usr/bin/env bash
# The PyTorch python: site lookups go to this machine's python3; the peer writes one record.
[[ "$1" == -c ]] && exec python3 "$@"
while (( $# )); do [[ "$1" == --json ]] && json=$2; shift; done
echo '[{"suite": "models", "case": "resnet50 b256 224", "dtype": "f16", "impl": "torch", "threads": 16, "variant": "f16-amp-cl", "median_ms": 45.0, "min_ms": 44.0, "gflops": 0, "device": "cuda:0", "images_per_s": 5689, "peak_device_mb": 11000, "peak_device_mb_steps": 10500}]' >"$json"
EOF
chmod +x "$fake"/bin/* "$fake"/tools/*

# One run of the GPU side against the fakes; its rows in $fake/out-NAME/gpu-check-rows.txt.
dry() {  # NAME FAULTS
  local out="$fake/out-$1" t0=$SECONDS rc
  mkdir -p "$out"
  env PATH="$fake/tools:$PATH" PRECIS_GPU_BIN="$fake/bin" TORCH_PYTHON="$fake/tools/torch-python" \
      PRECIS_GPU_CARRY="$fake/carry" LIMIT_PCT=3 BUDGET_S=120 OUT="$out" FAKE_FAULTS="$2" FAKE_FAULTY_TEST="$faulty_test" \
      bash tests/gpu/run.sh >"$out/console.log" 2>&1
  rc=$?
  echo "-- $1 run (faults: ${2:-none}): exit $rc in $((SECONDS - t0)) s"
  sed 's/^/   /' "$out/gpu-check-rows.txt"
  return $rc
}
result() { grep -F "$2 |" "$fake/out-$1/gpu-check-rows.txt" | head -1 | awk -F' [|] ' '{print $2}'; }

dry clean "" || { cat "$fake/out-clean/console.log"; fail "the clean fake run failed"; }
grep -vE ' \| (ok|info) \| ' "$fake/out-clean/gpu-check-rows.txt" && fail "the clean run has a row that is not ok"
for want in "$faulty_test [cuda]" "memcheck (direct allocator)" "resnet20 f16 cuda vs cpu" "bert-mini 150 steps cuda f16" \
            "precis-bench models --device cuda" "torch_models.py --device cuda" "time budget"; do
  [[ "$(result clean "$want")" == ok ]] || fail "the clean run has no ok row '$want'"
done
[[ "$(result clean "benchmarks/report.py")" == info ]] || fail "the clean run has no report.py row"
grep -q "| 9000 (8500) | 11000 (10500) | OVER PEER |" "$fake/out-clean/bench-report.md" \
  || fail "bench-report.md does not set precis's peak device memory (and its steps') beside PyTorch's"

dry faulty "no_tests memcheck empty_csv crash_verdict timeout" && fail "a run with faults passed"
[[ "$(result faulty "$faulty_test [cuda]")" == FAIL ]] || fail "a filter matching nothing did not fail its row"
[[ "$(result faulty "memcheck (direct allocator)")" == FAIL ]] || fail "a memcheck error did not fail its row"
[[ "$(result faulty "resnet20 f16 cuda vs cpu")" == FAIL ]] || fail "an empty metrics CSV did not fail the ResNet row"
[[ "$(result faulty "bert-mini 150 steps cuda f16")" == FAIL ]] || fail "a crashing verdict did not fail the BERT row"
[[ "$(result faulty "precis-bench models --device cuda")" == TIMEOUT ]] || fail "a step past its limit is not TIMEOUT"
[[ "$(result faulty "torch_models.py --device cuda")" == ok ]] || fail "a fault leaked into the next step"

dry failing "test_fails" && fail "a failed test case passed the check"
[[ "$(result failing "$faulty_test [cuda]")" == FAIL ]] || fail "a failed test case did not fail its row"
echo "dry_run: ok (a clean fake run passes; every fault fails its own row and the check)"
