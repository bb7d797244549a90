# The GPU side of tests/gpu/run.sh (sourced by it): the rows, the steps and their verdicts. It reads
# its programs from variables so that tests/gpu/dry_run.sh can run it against a fake GPU layer:
#   PRECIS_GPU_BIN   a folder of ready executables (skips unpacking the bundle)
#   TORCH_PYTHON     the python3 that holds PyTorch and the nvidia wheels
#   LIMIT_PCT        every step's time limit in percent (100; the dry run shortens them)
# nvidia-smi and compute-sanitizer are taken from PATH.

summary=()   # rows: "step|result|detail"
failed=0
# Each row also goes to $OUT/gpu-check-rows.txt at once, so that a run stopped by the device call's
# limit still brings back what it had found. Any result but ok fails the check.
row() {
  summary+=("$1|$2|$3")
  [[ "$2" != ok && "$2" != info ]] && failed=1
  [[ -n "${OUT:-}" && -d "${OUT:-}" ]] && printf '%s | %s | %s\n' "$1" "$2" "$3" >>"$OUT/gpu-check-rows.txt"
  return 0
}
step() { echo; echo "== $*"; }
print_summary() {
  echo
  echo "== summary"
  printf '%-44s %-7s %s\n' "step" "result" "detail"
  printf '%-44s %-7s %s\n' "----" "------" "------"
  local r a b c
  for r in "${summary[@]}"; do
    IFS='|' read -r a b c <<<"$r"
    printf '%-44s %-7s %s\n' "$a" "$b" "$c"
  done
}

# ok, TIMEOUT (cut by its limit: timeout's 124, or 137 after the kill) or FAIL, from an exit status.
result_of() {
  case "$1" in
    0) echo ok ;;
    124 | 137) echo TIMEOUT ;;
    *) echo FAIL ;;
  esac
}

# A step's limit: LIMIT scaled by LIMIT_PCT, and never past the budget's end.
limit_for() {  # LIMIT
  local lim=$(( $1 * ${LIMIT_PCT:-100} / 100 )) left=$(( BUDGET_S - (SECONDS - start) ))
  (( lim < 1 )) && lim=1
  (( left < lim )) && lim=$left
  echo "$lim"
}

# Runs CMD under its limit with its output in $logdir/NAME.log (the last lines on the console),
# then appends the log to $OUT/gpu-check.log. Returns CMD's status (124/137: cut by the limit; 125:
# no time left in the budget, not run).
logged() {  # NAME LIMIT CMD...
  local name=$1 lim rc; lim=$(limit_for "$2"); shift 2
  if (( lim <= 0 )); then
    echo "$name: not run, the budget of $BUDGET_S s is spent" | tee "$logdir/$name.log"
    return 125
  fi
  timeout --kill-after=5 "$lim" "$@" >"$logdir/$name.log" 2>&1; rc=$?
  (( rc == 124 || rc == 137 )) && echo "$name: cut at its limit of $lim s" >>"$logdir/$name.log"
  tail -n 6 "$logdir/$name.log"
  [[ -n "${OUT:-}" && -d "${OUT:-}" ]] && { echo "===== $name (exit $rc, limit $lim s)"; cat "$logdir/$name.log"; } >>"$OUT/gpu-check.log"
  return "$rc"
}

# A verdict script's answer "ok|detail" or "FAIL|detail"; anything else (a crash, no output) is a
# FAIL naming the script's exit status.
verdict_row() {  # STEP STATUS OUTPUT
  local name=$1 rc=$2 out=$3
  if (( rc == 0 )) && [[ "$out" =~ ^(ok|FAIL)\| ]]; then
    row "$name" "${out%%|*}" "${out#*|}"
  else
    row "$name" FAIL "the verdict failed (exit $rc): $(tail -1 <<<"$out" | cut -c1-100)"
  fi
}

# Catch2's summary line ("test cases: 12 | 11 passed | 1 failed"), or the last line.
catch_summary() {  # LOG
  grep -E "^(test cases|All tests passed)" "$1" | tail -1 | tr -s ' ' || tail -1 "$1"
}

# ---- the bundle, or a build on the GPU machine ------------------------------------------------------
# Puts the executables' folder in BIN and the bundle's libraries on LD_LIBRARY_PATH.
unpack_bundle() {
  local dir=/tmp/precis-gpu-bundle
  [[ -s "$CARRY/bundle.tar.xz" ]] || { echo "no $CARRY/bundle.tar.xz (run tests/gpu/run.sh --prepare here)"; return 1; }
  rm -rf "$dir" && mkdir -p "$dir" && xz -dc "$CARRY/bundle.tar.xz" | tar -C "$dir" -xf - || return 1
  BIN="$dir/bundle/bin"
  export LD_LIBRARY_PATH="$dir/bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# Every executable of BIN loads (ldd finds each library) and starts (--help); so does the CUDA
# backend that libprecis.so opens at run time (beside it in the bundle's lib/; core/cuda_backend.h):
# the [cuda] tests then fail under PRECIS_REQUIRE_GPU=1 if it cannot be loaded after all.
probe_bundle() {
  local exe bad=0 backend
  for exe in "$BIN"/*; do
    if ldd "$exe" | grep -q "not found"; then echo "$exe:"; ldd "$exe" | grep "not found"; bad=1; continue; fi
    "$exe" --help >/dev/null 2>&1 || { echo "$exe does not start"; bad=1; }
  done
  if [[ -d "$BIN/../lib" ]]; then
    backend=$(ls "$BIN"/../lib/libprecis_cuda.so.* 2>/dev/null | head -1)
    if [[ -z "$backend" ]]; then echo "the bundle has no libprecis_cuda.so (the CUDA backend)"; bad=1
    elif ldd "$backend" | grep -q "not found"; then echo "$backend:"; ldd "$backend" | grep "not found"; bad=1; fi
  fi
  return $bad
}

# The slow path: the carried .debs unpacked under the build folder (never into /), a configure with
# CUDA, and a build of what the check runs; BIN then holds links to the results.
build_here() {
  local prefix="$ROOT/$BUILD_DIR/_deps-root" lib deb t
  mkdir -p "$prefix"
  for deb in "$CARRY"/debs/*.deb; do dpkg-deb -x "$deb" "$prefix" || return 1; done
  lib="$prefix/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local cfg=(cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPRECIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH"
             -DPRECIS_LAYER_CHECKS=OFF -DPRECIS_MPI=OFF "-DCMAKE_PREFIX_PATH=$prefix/usr"
             "-DZLIB_INCLUDE_DIR=$prefix/usr/include" "-DZLIB_LIBRARY=$lib/libz.a" "-DPRECIS_CLI11_INCLUDE_DIR=$prefix/usr/include"
             "-DPRECIS_CUDNN_PYTHON=$(command -v "$TORCH_PYTHON")")
  command -v ninja >/dev/null 2>&1 && cfg+=(-G Ninja)
  "${cfg[@]}" || return 1
  mapfile -t tests < <(cuda_test_targets)
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${tests[@]}" "${TOOLS[@]}" || return 1
  BIN="$ROOT/$BUILD_DIR/gpu-bin"
  mkdir -p "$BIN"
  for t in "${tests[@]}"; do ln -sf "$ROOT/$BUILD_DIR/tests/$t" "$BIN/$t"; done
  ln -sf "$ROOT/$BUILD_DIR/models/tools/precis-train" "$BIN/precis-train"
  ln -sf "$ROOT/$BUILD_DIR/benchmarks/precis-bench" "$BIN/precis-bench"
}

# ---- the check ------------------------------------------------------------------------------------
gpu_check() {
  start=$SECONDS
  logdir=$(mktemp -d /tmp/precis-gpu-check.XXXX)
  step "machine"
  local gpu sp rc t0 exe name n filter
  if ! gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1); then
    row "GPU" FAIL "nvidia-smi failed: $(head -1 <<<"$gpu")"
    finish
  fi
  echo "$gpu"
  row "machine" info "$(head -1 <<<"$gpu"); $(nproc) cpus; commit $(cat "$CARRY/commit" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)"

  step "libraries: the bundle, the PyTorch wheels' CUDA libraries"
  if sp=$("$TORCH_PYTHON" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null); then
    for d in cu13 cudnn nccl; do [[ -d "$sp/nvidia/$d/lib" ]] && LD_LIBRARY_PATH="$sp/nvidia/$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; done
  fi
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"
  t0=$SECONDS
  if [[ -n "${PRECIS_GPU_BIN:-}" ]]; then
    BIN=$PRECIS_GPU_BIN
  elif ! unpack_bundle; then
    row "bundle" FAIL "cannot unpack $CARRY/bundle.tar.xz"
    finish
  fi
  if probe_bundle >"$logdir/probe.log" 2>&1; then
    row "bundle" ok "$(ls "$BIN" | wc -l) executables start, every library found; $((SECONDS - t0)) s"
  else
    cat "$logdir/probe.log"
    row "bundle" FAIL "$(head -2 "$logdir/probe.log" | tr '\n' ' ' | cut -c1-120); building here instead"
    t0=$SECONDS
    if logged build 330 build_here; then
      row "build on the GPU machine" ok "$((SECONDS - t0)) s"
    else
      row "build on the GPU machine" "$(result_of $?)" "see build in gpu-check.log"
      finish
    fi
  fi

  step "[cuda] tests (PRECIS_REQUIRE_GPU=1: no skips), memcheck beside them"
  export PRECIS_REQUIRE_GPU=1
  # precis_models_tests runs precis-train by the path it was built at, unless told where it is now.
  export PRECIS_TRAIN_EXE="$BIN/precis-train"
  # ... and reads the fixtures of tests/ at the path of the source tree it was built from, unless
  # told where this copy of the tree is.
  export PRECIS_TEST_DATA_DIR="$ROOT/tests"
  # memcheck sees an overrun only past the end of a cudaMalloc: the direct allocator gives each
  # tensor its own. Left out: the out-of-memory test (it asks for more than the device has) and the
  # two tests of the caching allocator itself, which the direct one replaces.
  local memcheck_pid memcheck_t0=$SECONDS
  local memcheck_spec='[cuda]~"a CUDA allocation beyond the device*"~"the CUDA caching allocator reuses freed blocks*"'
  memcheck_spec+='~"the CUDA allocator keeps a block used on another stream until that stream is done"'
  PRECIS_CUDA_ALLOCATOR=direct logged memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 99 \
    --leak-check no "$BIN/precis_cuda_tests" "$memcheck_spec" --warn NoTests >/dev/null 2>&1 &
  memcheck_pid=$!
  for exe in "$BIN"/precis_*_tests; do
    name=$(basename "$exe")
    filter=("[cuda]")
    [[ "$name" == precis_cuda_tests ]] && filter=()
    # Catch2 v2 exits with the number listed: count the names, ignore the status.
    n=$("$exe" --list-test-names-only "${filter[@]}" 2>/dev/null | grep -c . || true)
    if (( n == 0 )); then
      row "$name ${filter[*]:-(all)}" FAIL "the filter matches no test case"
      continue
    fi
    t0=$SECONDS
    logged "$name" 240 "$exe" "${filter[@]}" --warn NoTests; rc=$?
    row "$name ${filter[*]:-(all)}" "$(result_of $rc)" "$n test cases, $((SECONDS - t0)) s; $(catch_summary "$logdir/$name.log")"
  done
  wait "$memcheck_pid"; rc=$?
  if (( rc == 0 )) && grep -q "ERROR SUMMARY: 0 errors" "$logdir/memcheck.log"; then
    row "memcheck (direct allocator)" ok "precis_cuda_tests [cuda]: 0 errors, $((SECONDS - memcheck_t0)) s"
  else
    row "memcheck (direct allocator)" "$( (( rc == 0 )) && echo FAIL || result_of $rc)" \
        "exit $rc; $(grep -m1 "ERROR SUMMARY" "$logdir/memcheck.log" || tail -1 "$logdir/memcheck.log")"
  fi
  if [[ -s tests/gpu/racecheck_tests.txt ]]; then
    local races=0 runs=0 exe_name test_name
    t0=$SECONDS
    while IFS=$'\t' read -r exe_name test_name; do
      [[ -z "$exe_name" || "$exe_name" == \#* ]] && continue
      runs=$((runs + 1))
      logged "racecheck-$runs" 90 compute-sanitizer --tool racecheck --error-exitcode 99 "$BIN/$exe_name" "$test_name" \
        --warn NoTests >/dev/null || races=$((races + 1))
    done <tests/gpu/racecheck_tests.txt
    row "racecheck" "$( (( races == 0 )) && echo ok || echo FAIL)" "$runs test cases, $races with a hazard or error; $((SECONDS - t0)) s"
  fi

  local train="$BIN/precis-train"
  step "ResNet-20 f16 on Fashion-MNIST: cuda against the CPU"
  # The same options on both devices: same seed, batches, augmentation and lr schedule (over 20
  # steps); the CPU stops after 10.
  local resnet=(resnet --model resnet20 --data "$CARRY/fashion-mnist" --precision f16 --batch 128 --epochs 1
                --limit-train 2560 --limit-test 1000 --workers 4 --seed 1 --log-every 5)
  t0=$SECONDS
  logged resnet-cuda 150 "$train" "${resnet[@]}" --device cuda --metrics "$logdir/resnet-cuda.csv"; local rc_cuda=$?
  logged resnet-cpu 150 "$train" "${resnet[@]}" --device cpu --stop-after-steps 10 --metrics "$logdir/resnet-cpu.csv"; local rc_cpu=$?
  if (( rc_cuda == 0 && rc_cpu == 0 )); then
    out=$(python3 - "$logdir/resnet-cpu.csv" "$logdir/resnet-cuda.csv" 2>&1 <<'PY'
import csv, sys
cpu = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
gpu = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[2]))]
if len(cpu) < 10 or len(gpu) < 20:
    print(f"FAIL|too few steps: cpu {len(cpu)}, cuda {len(gpu)}")
    sys.exit(0)
bad = [i + 1 for i in range(10) if abs(gpu[i] - cpu[i]) > 0.03 * cpu[i] + 0.02]
first, last = sum(gpu[:5]) / 5, sum(gpu[15:20]) / 5
worst = max(abs(g - c) for g, c in zip(gpu[:10], cpu[:10]))
ok = not bad and last < 0.9 * first
print(("ok" if ok else "FAIL") + f"|10 losses within 0.03*cpu+0.02 (worst {worst:.4f}{', off at steps ' + str(bad) if bad else ''}); "
      f"loss {first:.3f} -> {last:.3f}")
PY
); verdict_row "resnet20 f16 cuda vs cpu" $? "$out"
  else
    row "resnet20 f16 cuda vs cpu" "$(result_of $(( rc_cuda != 0 ? rc_cuda : rc_cpu )))" "precis-train exit cuda $rc_cuda, cpu $rc_cpu"
  fi

  local precision
  for precision in f16 bf16; do
    step "BERT-mini: 150 steps on cuda ($precision)"
    t0=$SECONDS
    if logged "bert-$precision" 120 "$train" bert-mini --device cuda --precision "$precision" --data "$CARRY/text/corpus.txt.gz" \
         --vocab "$logdir/vocab.txt" --vocab-size 8192 --batch 32 --max-len 128 --stop-after-steps 150 --limit-test 256 \
         --workers 4 --log-every 50 --metrics "$logdir/bert-$precision.csv"; then
      out=$(python3 - "$logdir/bert-$precision.csv" 2>&1 <<'PY'
import csv, math, sys
loss = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
if len(loss) < 40:
    print(f"FAIL|{len(loss)} steps in the metrics")
    sys.exit(0)
ok = len(loss) == 150 and all(math.isfinite(v) for v in loss) and sum(loss[-20:]) < sum(loss[:20])
print(("ok" if ok else "FAIL") + f"|{len(loss)} steps, loss {sum(loss[:20]) / 20:.3f} (first 20) -> {sum(loss[-20:]) / 20:.3f} (last 20)")
PY
); verdict_row "bert-mini 150 steps cuda $precision" $? "$out (total $((SECONDS - t0)) s)"
    else
      rc=$?; row "bert-mini 150 steps cuda $precision" "$(result_of $rc)" "precis-train exit $rc"
    fi
  done

  step "profile: ResNet-50 f32 (IEEE) on the device clock"
  # Per-op device times (CUDA events, ops/profiler.h) must add up to at least 90 % of the steps.
  # One variant: "resnet50 b256 224 f32" would select the three f32 ones (IEEE, defaults, TF32).
  profile_case "profile resnet50 f32 (device clock)" "resnet50 b256 224 f32-notf32-nchw" 90
  step "profile: ResNet-50 f16 AMP channels-last on the device clock"
  # The case furthest behind PyTorch (issue 26): its per-op table (in the log) is what the speed
  # work reads. Its share is information: an eager f16 step may wait for the host.
  profile_case "profile resnet50 f16 AMP cl (device clock)" "resnet50 b256 224 f16-amp-cl" ""

  step "benchmark: precis-bench models --device cuda; the PyTorch peer"
  # Every case and variant: f32 IEEE, f32 defaults (TF32 convolutions), f32 TF32, f16 and bf16 AMP (eager and
  # captured in a CUDA graph: graphs-*),
  # named as the peer's variants so that benchmarks/report.py pairs them; ResNet-50 NCHW and channels-last
  # (21 cases with BERT-mini's fp8-linear; the 4 of 2026-12-04 took 8 s).
  t0=$SECONDS
  logged bench-precis 150 "$BIN/precis-bench" models --device cuda --no-peak --repeat 20 --min-time 1 \
    --json "$logdir/bench-precis.json"; rc=$?
  row "precis-bench models --device cuda" "$(result_of $rc)" "$((SECONDS - t0)) s"
  t0=$SECONDS
  # The PyTorch variants its users run (NCHW and channels-last, TF32 off and on, f16/bf16 AMP, bf16 graphed).
  logged bench-torch 170 "$TORCH_PYTHON" benchmarks/peers/torch_models.py --device cuda --repeat 20 --min-time 1 \
    --max-seconds 130 --json "$logdir/bench-torch.json"; rc=$?
  row "torch_models.py --device cuda" "$(result_of $rc)" "$((SECONDS - t0)) s"
  bench_rows
  finish
}

# One profiled precis-bench case: a row with the share of the steps' time the per-op device times
# cover; ok only at MIN_SHARE percent or more, or info when MIN_SHARE is empty. A failed run fails.
profile_case() {  # ROW CASE MIN_SHARE
  local name=$1 case=$2 min=$3 log out rc
  log="profile-$(tr -c 'a-z0-9' '-' <<<"$case" | tr -s '-')"
  log=${log%-}
  if logged "$log" 90 "$BIN/precis-bench" models --device cuda --no-peak --profile --repeat 5 --min-time 0 \
       --cases "$case"; then
    # The report's sum line: "ops: S ms of W ms wall (P%; device clock D ms, wall clock C ms)".
    out=$(python3 - "$logdir/$log.log" "$min" 2>&1 <<'PY'
import re, sys
m = re.search(r"^ops: ([0-9.]+) ms of ([0-9.]+) ms wall \(([0-9.]+)%([^)]*)\)", open(sys.argv[1]).read(), re.M)
if not m:
    print("FAIL|no 'ops: ... ms wall (...%' line in the profile")
elif not sys.argv[2]:
    print(f"ok|per-op times {float(m.group(3)):.1f}% of the steps, {m.group(2)} ms wall{m.group(4)}")
else:
    share = float(m.group(3))
    print(("ok" if share >= float(sys.argv[2]) else "FAIL") +
          f"|per-op times {share:.1f}% of the steps (>= {sys.argv[2]}%){m.group(4)}")
PY
)
    rc=$?
    if [[ -z "$min" && $rc == 0 && "$out" == ok\|* ]]; then
      row "$name" info "${out#ok|}"
    else
      verdict_row "$name" $rc "$out"
    fi
  else
    rc=$?; row "$name" "$(result_of $rc)" "precis-bench exit $rc"
  fi
}

# One info row per (case, dtype, variant): step time, throughput, peak device memory over the case
# (and over the timed steps alone); then benchmarks/report.py's table of precis against the best
# PyTorch recipe of each math, verdicts included, in $OUT/bench-report.md.
bench_rows() {
  local line out
  [[ -s "$logdir/bench-precis.json" || -s "$logdir/bench-torch.json" ]] || return 0
  while IFS= read -r line; do row "${line%%|*}" info "${line#*|}"; done < <(python3 - "$logdir"/bench-*.json <<'PY'
import json, sys
rows = []
for p in sys.argv[1:]:
    try:
        recs = json.load(open(p))
    except (OSError, ValueError):
        continue
    for r in recs:
        rate = next((f"{v:.0f} {k[:-6]}/s" for k, v in r.items() if k.endswith("_per_s")), "")
        what = f"{r['impl']} {r.get('variant', '')}".strip()
        steps = f" (steps {r['peak_device_mb_steps']:.0f})" if "peak_device_mb_steps" in r else ""
        rows.append((r["case"], r["dtype"], f"  {r['case']} {r['dtype']}|{what}: {r['median_ms']:.1f} ms, {rate}, "
                     f"{r.get('peak_device_mb', 0):.0f} MiB{steps}"))
for _, _, line in sorted(rows):
    print(line)
PY
)
  [[ -s "$logdir/bench-precis.json" && -s "$logdir/bench-torch.json" ]] || return 0
  if out=$(python3 benchmarks/report.py "$logdir/bench-precis.json" "$logdir/bench-torch.json" --suite all \
             --out "$logdir/bench-report.md" 2>&1); then
    row "benchmarks/report.py" info "$(tail -n 1 "$logdir/bench-report.md")"
    [[ -n "${OUT:-}" && -d "${OUT:-}" ]] && cp "$logdir/bench-report.md" "$OUT/"
  else
    row "benchmarks/report.py" FAIL "$(tail -n 1 <<<"$out")"
  fi
  return 0
}

finish() {
  local total=$((SECONDS - start))
  if (( total > BUDGET_S )); then row "time budget" FAIL "$total s > $BUDGET_S s"; else row "time budget" ok "$total s <= $BUDGET_S s"; fi
  print_summary | tee "$logdir/summary.txt"
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
    cp "$logdir/summary.txt" "$OUT/gpu-check.txt"
    cp "$logdir"/bench-*.json "$OUT/" 2>/dev/null
  fi
  if (( failed )); then echo "GPU check FAILED"; exit 1; fi
  echo "GPU check passed"
  exit 0
}
