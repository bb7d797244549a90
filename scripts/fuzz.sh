#!/usr/bin/env bash
# Builds the libFuzzer harnesses of fuzz/ (clang, address + undefined-behaviour sanitizers, in
# build-fuzz/) and runs each one for SECONDS on its seed corpus, after replaying every committed
# regression input. Prints per harness: executions, coverage (libFuzzer's cov: edges and ft:
# features at the end of the run), corpus size and crash files. Exits non-zero when anything
# crashed (a sanitizer report, an exception other than precis::Error, a timeout or an
# out-of-memory). See fuzz/README.md.
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]    default 30 s each, all harnesses (fuzz/fuzz_*.cpp)
#   scripts/fuzz.sh --seeds                    rewrite fuzz/corpus/ with precis_fuzz_seeds
#
# Environment: FUZZ_BUILD_DIR (build-fuzz), JOBS (nproc, for the build), FUZZ_JOBS (nproc: harnesses run
# side by side, one process each), CXX (clang++).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
# (Before OMP_NUM_THREADS=1 is exported below: nproc follows it.)
fuzz_jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}

# clang and its libFuzzer runtime (Debian 12: clang-14, libclang-rt-14-dev), installed when missing.
need=()
command -v "${CXX:-clang++}" >/dev/null 2>&1 || need+=(clang)
compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a" >/dev/null || need+=(libclang-rt-14-dev)
if ((${#need[@]})); then
  echo "== fuzz: installing ${need[*]}"
  sudo=(); ((EUID == 0)) || sudo=(sudo)
  "${sudo[@]}" apt-get update -q && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${need[@]}"
fi

if [[ ! -f $build/build.ninja ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -gline-tables-only" \
    -DCMAKE_CXX_COMPILER="${CXX:-clang++}" -DPRECIS_CUDA=OFF -DPRECIS_FUZZ=ON -DPRECIS_BUILD_TESTS=OFF \
    -DPRECIS_BUILD_BENCHMARKS=OFF -DPRECIS_LAYER_CHECKS=OFF
fi
build_start=$SECONDS
cmake --build "$build" -j "$jobs"
echo "== fuzz: build took $((SECONDS - build_start)) s"

if [[ ${1:-} == --seeds ]]; then
  rm -rf fuzz/corpus
  "$build/fuzz/precis_fuzz_seeds" fuzz/corpus
  exit 0
fi

secs=${1:-30}
shift || true
if (($# > 0)); then
  harnesses=("$@")
else
  harnesses=()
  for f in fuzz/fuzz_*.cpp; do harnesses+=("$(basename "$f" .cpp)"); done
fi

# Sanitizers: stop at the first report; a leak is a finding too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1:suppressions=$root/fuzz/ubsan-suppressions.txt}
export PRECIS_NUM_THREADS=1 OMP_NUM_THREADS=1
flags=(-rss_limit_mb=2048 -timeout=10 -print_final_stats=1)

runs=$build/fuzz-runs
# fuzz_one <harness>: replays its committed regression inputs, then fuzzes it for $secs. Writes what
# it found to $runs/<harness>/report, its summary line to .../summary, and .../failed when it failed.
fuzz_one() {
  local h=$1 bin=$build/fuzz/$1 dir=$runs/$1
  local art=$dir/artifacts report=$dir/report
  rm -rf "$dir" && mkdir -p "$art" "$dir/corpus" fuzz/corpus/"$h"
  : >"$report"

  # Every committed regression input first: each must now pass.
  local regress=(fuzz/regressions/"$h"/*)
  if [[ -e ${regress[0]} ]]; then
    if ! "$bin" "${flags[@]}" -artifact_prefix="$art/" "${regress[@]}" >"$dir/regressions.log" 2>&1; then
      { echo "== fuzz: $h: a regression input fails again:"; tail -40 "$dir/regressions.log"; } >>"$report"
      printf '%-18s REGRESSION FAILED (%s)\n' "$h" "$dir/regressions.log" >"$dir/summary"
      touch "$dir/failed"
      return
    fi
  fi

  # New inputs go to the scratch corpus (first folder); the committed seeds are only read.
  local log=$dir/fuzz.log rc=0
  "$bin" "${flags[@]}" -max_total_time="$secs" -artifact_prefix="$art/" "$dir/corpus" "fuzz/corpus/$h" \
    >"$log" 2>&1 || rc=$?
  local execs last cov ft corp crashes line
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -aE '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
  crashes=$(find "$art" -type f | sort | tr '\n' ' ')
  line=$(printf '%-18s execs %-9s cov %-6s ft %-7s corpus %-10s' "$h" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}")
  if ((rc != 0)) || [[ -n $crashes ]]; then
    touch "$dir/failed"
    line+=" CRASH rc=$rc ${crashes:-(no artifact)}"
    {
      echo "== fuzz: $h crashed (rc $rc); the end of $log:"
      grep -aE 'ERROR|SUMMARY|runtime error|terminate|==[0-9]+==' "$log" | head -20 || true
      tail -25 "$log"
    } >>"$report"
  fi
  echo "$line" >"$dir/summary"
}

# FUZZ_JOBS harnesses at a time (default: one per core). Each is a single-threaded process that
# fuzzes for a wall-clock time, so side by side on their own cores they run as many inputs each as
# one after the other, in 1/FUZZ_JOBS of the time.
for h in "${harnesses[@]}"; do
  [[ -x $build/fuzz/$h ]] || { echo "fuzz: no harness $build/fuzz/$h"; exit 2; }
done
running=0
for h in "${harnesses[@]}"; do
  if ((running >= fuzz_jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$h" &
  running=$((running + 1))
done
wait

failed=0
summary=()
for h in "${harnesses[@]}"; do
  cat "$runs/$h/report" 2>/dev/null || true
  if [[ ! -s $runs/$h/summary ]]; then
    summary+=("$(printf '%-18s DID NOT FINISH (no summary in %s)' "$h" "$runs/$h")")
    failed=1
    continue
  fi
  line=$(cat "$runs/$h/summary")
  echo "$line"
  summary+=("$line")
  [[ -e $runs/$h/failed ]] && failed=1
done

echo "== fuzz summary (${secs} s per harness; logs and crash inputs under $root/$runs)"
printf '%s\n' "${summary[@]}"
if ((failed)); then
  echo "== fuzz: FAILED. Copy each crash input to fuzz/regressions/<harness>/ with the fix (fuzz/README.md)."
  exit 1
fi
echo "== fuzz: no crash"
