#!/usr/bin/env bash
# The GPU check: one prepared script for the GPU machine (an H200, sm_90; CUDA 13, CMake, ninja,
# python3 with PyTorch; no network, no Eigen/Catch2/zlib/CLI11/oneDNN headers), from a bare machine
# in under 8 minutes (the budget is checked and reported).
#
#   tests/gpu/run.sh --prepare [DIR]   here, with network: fill DIR (.gpu-carry) with what the GPU
#                                      machine lacks (Debian .debs of the build dependencies, a
#                                      Fashion-MNIST subset, a WordNet-gloss text corpus)
#   tests/gpu/run.sh                   on the GPU machine: the check below
#   tests/gpu/run.sh --check           here or in CI, no GPU: everything that can be checked
#                                      without one (.ci/run runs it)
#
# The device call (docs/gpu.md; /work/.library/device/README.md), after `--prepare` here:
#
#   run(command="bash tests/gpu/run.sh", carry=[".gpu-carry"], timeout_s=570)
#
# .gpu-carry is ignored by git (.gitignore) and holds ~13 MiB;
# the repository's copy is ~5 MiB, well inside the 64 MiB a call may carry. The summary table and
# the logs are also written to $OUT (gpu-check.txt, gpu-check.log, the benchmark JSON; each row at once
# to gpu-check-rows.txt) when $OUT is set.
#
# What the check does, each step with its own time limit:
#   1. unpack the carried .debs under $BUILD_DIR/_deps-root (never into /); configure with CUDA
#      (sm_90), oneDNN from the carried package (PRECIS_ONEDNN=OFF, Eigen's GEMM, if that fails)
#   2. build only what runs: the test executables holding [cuda] tests, precis-train, precis-bench
#   3. every [cuda] test with PRECIS_REQUIRE_GPU=1, which turns PRECIS_REQUIRE_CUDA()'s "no usable
#      GPU" skip into a failure (tests/gpu/strict_switch_test.sh proves that); precis_cuda_tests whole
#   4. compute-sanitizer memcheck over precis_cuda_tests' [cuda] kernel tests
#   5. ResNet-20 f16 (autocast + loss scaler) on the Fashion-MNIST subset, 20 steps on cuda and the
#      first 10 on the CPU from the same seed: the first 10 losses agree within
#      |cuda - cpu| <= 0.03 * cpu + 0.02, and the cuda loss falls (mean of steps 16-20 below 0.9 x
#      the mean of steps 1-5)
#   6. 200 BERT-mini steps on cuda (f16 AMP) on the gloss corpus: finite losses, falling
#   7. precis-bench models --device cuda and benchmarks/peers/torch_models.py --device cuda
#      (ResNet-50 b256 224², BERT-mini b64x128; f32 and f16 AMP)
#   8. one table of all of it
# Any failed step fails the check (exit 1); nothing is skipped silently.
#
# Environment: BUILD_DIR (build-gpu), CUDA_ARCH (90), JOBS (nproc), PRECIS_GPU_CARRY (.gpu-carry),
# BUDGET_S (480).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

BUILD_DIR=${BUILD_DIR:-build-gpu}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
CARRY=${PRECIS_GPU_CARRY:-.gpu-carry}
BUDGET_S=${BUDGET_S:-480}
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH=/usr/local/cuda/bin:$PATH

# Debian packages the GPU machine lacks (headers, CMake packages; libdnnl2 is oneDNN's library, which
# needs the OpenCL loader).
DEBS=(libeigen3-dev catch2 zlib1g-dev libcli11-dev libdnnl-dev libdnnl2 ocl-icd-libopencl1 ocl-icd-opencl-dev
      opencl-c-headers)
FASHION_TRAIN=5120   # examples of the carried Fashion-MNIST subset
FASHION_TEST=1000
GLOSS_LINES=25600    # lines of the carried text corpus (24320 training lines: 760 steps of 32)

summary=()   # rows: "step|result|detail"
failed=0
# Each row also goes to $OUT/gpu-check-rows.txt at once, so that a run stopped at the device call's
# time limit still brings back what it had found.
row() {
  summary+=("$1|$2|$3")
  [[ "$2" == FAIL ]] && failed=1
  [[ -n "${OUT:-}" && -d "${OUT:-}" ]] && printf '%s | %s | %s\n' "$1" "$2" "$3" >>"$OUT/gpu-check-rows.txt"
  return 0
}
step() { echo; echo "== $*"; }
print_summary() {
  echo
  echo "== summary"
  printf '%-40s %-6s %s\n' "step" "result" "detail"
  printf '%-40s %-6s %s\n' "----" "------" "------"
  local r a b c
  for r in "${summary[@]}"; do
    IFS='|' read -r a b c <<<"$r"
    printf '%-40s %-6s %s\n' "$a" "$b" "$c"
  done
}

# ---- preparing the carried folder (here, with network) --------------------------------------------
# The Fashion-MNIST subset: the first N training and M test examples of the Debian package's
# files, re-written as gzip IDX files (data/idx.h reads them).
write_fashion_subset() {  # SRC_DIR DEST_DIR
  python3 - "$1" "$2" "$FASHION_TRAIN" "$FASHION_TEST" <<'PY'
import gzip, struct, sys, os
src, dst, ntrain, ntest = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(dst, exist_ok=True)
def read(name):
    p = os.path.join(src, name)
    raw = open(p, "rb").read() if os.path.exists(p) else gzip.open(p + ".gz", "rb").read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return raw[:4], dims, raw[4 + 4 * ndim:]
for split, n in (("train", ntrain), ("t10k", ntest)):
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        magic, dims, body = read(f"{split}-{kind}")
        per = 1
        for d in dims[1:]:
            per *= d
        out = magic + struct.pack(">" + "I" * len(dims), n, *dims[1:]) + body[:n * per]
        with gzip.GzipFile(os.path.join(dst, f"{split}-{kind}.gz"), "wb", mtime=0) as f:
            f.write(out)
PY
}

# A text corpus for BERT-mini: WordNet's glosses (the default corpus of precis-train bert-mini),
# else this repository's documentation.
write_text_corpus() {  # DEST_FILE
  python3 - "$1" "$GLOSS_LINES" "$ROOT" <<'PY'
import glob, gzip, os, sys
dest, n, root = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = []
for part in ("noun", "verb", "adj", "adv"):
    p = f"/usr/share/wordnet/data.{part}"
    if os.path.exists(p):
        for line in open(p, encoding="utf-8", errors="replace"):
            if not line.startswith("  ") and "|" in line:
                lines.append(line.split("|", 1)[1].strip())
if not lines:
    for p in sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)):
        lines += [l.strip() for l in open(p, encoding="utf-8") if l.strip()]
lines = lines[:n]
with gzip.GzipFile(dest, "wb", mtime=0) as f:
    f.write(("\n".join(lines) + "\n").encode())
print(f"{len(lines)} lines")
PY
}

prepare() {  # DIR
  local dir=$1 fashion=/usr/share/datasets/fashion-mnist tmp
  mkdir -p "$dir/debs" "$dir/fashion-mnist" "$dir/text"
  echo "-- .debs: ${DEBS[*]}"
  (cd "$dir/debs" && rm -f ./*.deb && apt-get download "${DEBS[@]}") || { echo "apt-get download failed"; return 1; }
  if [[ ! -e "$fashion/train-images-idx3-ubyte.gz" && ! -e "$fashion/train-images-idx3-ubyte" ]]; then
    echo "-- Fashion-MNIST is not installed: taking it from the package dataset-fashion-mnist"
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download dataset-fashion-mnist && dpkg-deb -x dataset-fashion-mnist_*.deb root) || {
      echo "cannot get dataset-fashion-mnist"; rm -rf "$tmp"; return 1; }
    fashion="$tmp/root/usr/share/datasets/fashion-mnist"
  fi
  echo "-- Fashion-MNIST subset: $FASHION_TRAIN train, $FASHION_TEST test examples from $fashion"
  write_fashion_subset "$fashion" "$dir/fashion-mnist" || return 1
  [[ -n "${tmp:-}" ]] && rm -rf "$tmp"
  echo -n "-- text corpus: "
  write_text_corpus "$dir/text/corpus.txt.gz" || return 1
  du -sh "$dir"
}

# What the GPU machine needs in the carried folder: every .deb, the data. Prints what is missing.
carry_complete() {  # DIR
  local dir=$1 p ok=0
  for p in "${DEBS[@]}"; do
    compgen -G "$dir/debs/${p}_*.deb" >/dev/null || { echo "missing: $dir/debs/${p}_*.deb"; ok=1; }
  done
  for p in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [[ -s "$dir/fashion-mnist/$p.gz" ]] || { echo "missing: $dir/fashion-mnist/$p.gz"; ok=1; }
  done
  [[ -s "$dir/text/corpus.txt.gz" ]] || { echo "missing: $dir/text/corpus.txt.gz"; ok=1; }
  return $ok
}

# Unpacks the carried .debs into PREFIX_ROOT (not /: unpacking over the image can break it).
unpack_debs() {  # DIR PREFIX_ROOT
  local deb tmp
  mkdir -p "$2"
  for deb in "$1"/debs/*.deb; do
    if command -v dpkg-deb >/dev/null 2>&1; then
      dpkg-deb -x "$deb" "$2"
    else  # a .deb is an ar archive holding data.tar.*
      tmp=$(mktemp -d)
      (cd "$tmp" && ar x "$ROOT/$deb") && tar -xf "$tmp"/data.tar.* -C "$2"
      rm -rf "$tmp"
    fi
  done
}

# The configure command line (shared by the check and --check). $1: prefix root of the unpacked
# .debs ("" for the system's packages), $2: ON/OFF oneDNN, $3: build dir.
configure_cmd() {
  local prefix=$1 onednn=$2 dir=$3 lib
  cfg=(cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPRECIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH"
       -DPRECIS_ONEDNN="$onednn" -DPRECIS_LAYER_CHECKS=OFF -DPRECIS_MPI=OFF)
  command -v ninja >/dev/null 2>&1 && cfg+=(-G Ninja)
  if [[ -n "$prefix" ]]; then
    lib="$prefix/usr/lib/x86_64-linux-gnu"
    # The unpacked libz.so is a link to the runtime library, which is not in the prefix: use the
    # static libz.a from zlib1g-dev instead.
    cfg+=("-DCMAKE_PREFIX_PATH=$prefix/usr" "-DZLIB_INCLUDE_DIR=$prefix/usr/include" "-DZLIB_LIBRARY=$lib/libz.a"
          "-DPRECIS_CLI11_INCLUDE_DIR=$prefix/usr/include")
  fi
}

# The test executables that hold [cuda] tests: precis_<folder>_tests for each tests/<folder>/
# with a "[cuda]" tag (tests/dist runs under mpirun and is not built here).
cuda_test_targets() {
  grep -rl --include='*.cpp' '"[^"]*\[cuda\][^"]*"' tests | cut -d/ -f2 | sort -u | grep -vx dist |
    sed 's/.*/precis_&_tests/'
}

# ---- --check: what can be validated without a GPU ---------------------------------------------
check() {
  local t0=$SECONDS dir prefix exe
  step "syntax"
  if bash -n "$0" && bash -n tests/gpu/strict_switch_test.sh &&
     python3 -m py_compile benchmarks/peers/torch_models.py benchmarks/peers/peer_common.py; then
    row "syntax (bash -n, py_compile)" ok "run.sh, strict_switch_test.sh, torch_models.py"
  else
    row "syntax (bash -n, py_compile)" FAIL "see above"
  fi

  step "the carried folder"
  dir=$CARRY
  if ! carry_complete "$dir" >/dev/null 2>&1; then
    dir=$(mktemp -d)
    echo "$CARRY is absent or incomplete: preparing a scratch copy in $dir to prove it can be prepared"
    prepare "$dir" || { row "carried folder" FAIL "cannot be prepared (network? see above)"; }
  fi
  if carry_complete "$dir"; then
    local kib repo_kib
    kib=$(du -sk "$dir" | cut -f1)
    repo_kib=$(( $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) / 1024 ))
    if (( kib + repo_kib < 60 * 1024 )); then
      row "carried folder" ok "$((kib / 1024)) MiB + repository $((repo_kib / 1024)) MiB < 64 MiB"
    else
      row "carried folder" FAIL "$((kib / 1024)) MiB + repository $((repo_kib / 1024)) MiB: over the 64 MiB a call carries"
    fi
  else
    row "carried folder" FAIL "incomplete: see above"
  fi

  step "configure as the GPU machine does (carried packages, CUDA sm_$CUDA_ARCH)"
  prefix=$(mktemp -d)
  unpack_debs "$dir" "$prefix" 2>&1 | tail -2
  local what="CUDA sm_$CUDA_ARCH"
  configure_cmd "$prefix" ON "$prefix/build"
  if ! command -v nvcc >/dev/null 2>&1; then
    # No CUDA toolkit here: the same configure without CUDA still proves the carried packages.
    what="no nvcc here: CPU-only"
    cfg=("${cfg[@]/-DPRECIS_CUDA=ON/-DPRECIS_CUDA=OFF}")
  fi
  echo "${cfg[*]}"
  if ! "${cfg[@]}" >"$prefix/configure.log" 2>&1; then
    tail -20 "$prefix/configure.log"
    row "configure (carried deps)" FAIL "$what: see the log above"
  elif grep -q "precis-train" <(cmake --build "$prefix/build" --target help 2>/dev/null) &&
       grep -q "Eigen3_DIR:PATH=$prefix" "$prefix/build/CMakeCache.txt" &&
       grep -q "Catch2_DIR:PATH=$prefix" "$prefix/build/CMakeCache.txt" &&
       grep -q "dnnl_DIR:PATH=$prefix" "$prefix/build/CMakeCache.txt"; then
    row "configure (carried deps)" ok "$what; Eigen, Catch2, zlib, CLI11, oneDNN from the carried .debs"
  else
    row "configure (carried deps)" FAIL "$what: configured, but not from the carried packages or without precis-train"
  fi
  rm -rf "$prefix"
  [[ "$dir" != "$CARRY" ]] && rm -rf "$dir"

  step "the strict switch (PRECIS_REQUIRE_GPU=1 turns a skip into a failure)"
  exe=""
  for d in "${CHECK_BUILD_DIR:-build}" build-cuda build; do
    [[ -x "$d/tests/precis_cuda_tests" ]] && { exe="$d/tests/precis_cuda_tests"; break; }
  done
  if [[ -z "$exe" ]]; then
    row "strict switch" FAIL "no precis_cuda_tests built (build it: cmake --build build --target precis_cuda_tests)"
  elif bash tests/gpu/strict_switch_test.sh "$exe"; then
    row "strict switch" ok "$exe: skip without, failure with PRECIS_REQUIRE_GPU=1"
  else
    row "strict switch" FAIL "$exe: see above"
  fi

  step "the GPU benchmark refuses a machine without a GPU"
  local bench="" out
  for d in "${CHECK_BUILD_DIR:-build}" build-cuda build; do
    [[ -x "$d/benchmarks/precis-bench" ]] && { bench="$d/benchmarks/precis-bench"; break; }
  done
  if [[ -z "$bench" ]]; then
    row "precis-bench --device cuda (no GPU)" FAIL "no precis-bench built"
  elif nvidia-smi >/dev/null 2>&1; then
    row "precis-bench --device cuda (no GPU)" ok "not checked: this machine has a GPU"
  else
    out=$("$bench" models --device cuda --repeat 1 --no-peak 2>&1); local rc=$?
    echo "$out" | tail -3
    if (( rc == 1 )) && grep -q "cuda:0" <<<"$out"; then
      row "precis-bench --device cuda (no GPU)" ok "exit 1 naming cuda:0"
    else
      row "precis-bench --device cuda (no GPU)" FAIL "exit $rc; expected 1 with a message naming cuda:0"
    fi
  fi
  out=$(python3 benchmarks/peers/torch_models.py --device cuda --repeat 1 2>&1); local prc=$?
  echo "$out" | tail -2
  if (( prc != 0 )) || nvidia-smi >/dev/null 2>&1; then
    row "torch_models.py --device cuda (no GPU)" ok "exit $prc: $(tail -1 <<<"$out" | cut -c1-70)"
  else
    row "torch_models.py --device cuda (no GPU)" FAIL "exit 0 without a GPU"
  fi

  print_summary
  echo "(--check took $((SECONDS - t0)) s)"
  if (( failed )); then echo "GPU check --check FAILED"; exit 1; fi
  echo "GPU check --check passed"
  exit 0
}

case "${1:-}" in
  --prepare) prepare "${2:-$CARRY}"; exit $? ;;
  --check) check ;;
  "") ;;
  *) echo "usage: tests/gpu/run.sh [--prepare [DIR] | --check]" >&2; exit 2 ;;
esac

# ---- the check, on the GPU machine --------------------------------------------------------------
start=$SECONDS
logdir="$BUILD_DIR/gpu-check"
mkdir -p "$logdir"
finish() {
  local total=$((SECONDS - start))
  if (( total > BUDGET_S )); then row "time budget" FAIL "$total s > $BUDGET_S s"; else row "time budget" ok "$total s <= $BUDGET_S s"; fi
  print_summary | tee "$logdir/summary.txt"
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
    cp "$logdir/summary.txt" "$OUT/gpu-check.txt"
    cat "$logdir"/*.log > "$OUT/gpu-check.log" 2>/dev/null
    cp "$logdir"/*.json "$OUT/" 2>/dev/null
  fi
  if (( failed )); then echo "GPU check FAILED"; exit 1; fi
  echo "GPU check passed"
  exit 0
}
# Runs "$@" with a time limit and its output in $logdir/NAME.log (and on the console).
logged() {  # NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" 2>&1 | tee "$logdir/$name.log"
  return "${PIPESTATUS[0]}"
}

step "machine"
echo "cpus: $(nproc)"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader; then
  row "GPU" FAIL "nvidia-smi failed: no GPU or driver"
fi
command -v nvcc >/dev/null 2>&1 || { row "nvcc" FAIL "not found"; finish; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
row "machine" ok "${gpu:-no GPU}, $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'), $(nproc) cpus"

step "dependencies from $CARRY"
if ! carry_complete "$CARRY"; then
  row "carried folder" FAIL "incomplete: run tests/gpu/run.sh --prepare here and carry .gpu-carry"
  finish
fi
prefix="$ROOT/$BUILD_DIR/_deps-root"
unpack_debs "$CARRY" "$prefix"
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

step "configure"
t0=$SECONDS
onednn=ON
configure_cmd "$prefix" ON "$BUILD_DIR"
echo "${cfg[*]}"
if ! logged configure 120 "${cfg[@]}"; then
  echo "-- configure with oneDNN failed: again without it (Eigen's GEMM and the own convolution on the CPU)"
  rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
  onednn=OFF
  configure_cmd "$prefix" OFF "$BUILD_DIR"
  logged configure 120 "${cfg[@]}" || { row "configure" FAIL "see configure.log"; finish; }
fi
row "configure" ok "sm_$CUDA_ARCH, oneDNN $onednn, $((SECONDS - t0)) s"

step "build"
mapfile -t test_targets < <(cuda_test_targets)
targets=("${test_targets[@]}" precis-train precis-bench)
t0=$SECONDS
if logged build 330 cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"; then
  row "build" ok "${targets[*]}: $((SECONDS - t0)) s"
else
  row "build" FAIL "$((SECONDS - t0)) s; see build.log"
  finish
fi

step "[cuda] tests, PRECIS_REQUIRE_GPU=1 (no test may skip)"
export PRECIS_REQUIRE_GPU=1
for target in "${test_targets[@]}"; do
  exe="$BUILD_DIR/tests/$target"
  filter=("[cuda]")
  [[ "$target" == precis_cuda_tests ]] && filter=()
  # Catch2 v2 exits with the number listed: capture the list, ignore the status.
  n=$("$exe" --list-test-names-only "${filter[@]}" 2>/dev/null | grep -c . || true)
  t0=$SECONDS
  if logged "$target" 180 "$exe" "${filter[@]}"; then
    skips=$(grep -c "skipped" "$logdir/$target.log" || true)
    row "$target ${filter[*]:-(all)}" ok "$n test cases, $((SECONDS - t0)) s${skips:+, $skips skip notes (e.g. a second GPU)}"
  else
    row "$target ${filter[*]:-(all)}" FAIL "$n test cases, $((SECONDS - t0)) s; see $target.log"
  fi
done

step "compute-sanitizer memcheck (precis_cuda_tests [cuda], not the out-of-memory test)"
if command -v compute-sanitizer >/dev/null 2>&1; then
  t0=$SECONDS
  if logged memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 99 --leak-check no \
       "$BUILD_DIR/tests/precis_cuda_tests" '[cuda]~"a CUDA allocation beyond the device*"'; then
    row "memcheck" ok "precis_cuda_tests [cuda]: no errors, $((SECONDS - t0)) s"
  else
    row "memcheck" FAIL "see memcheck.log"
  fi
else
  row "memcheck" FAIL "compute-sanitizer not found"
fi

train="$BUILD_DIR/models/tools/precis-train"
step "ResNet-20 f16 on Fashion-MNIST: cuda against the CPU"
# The same options on both devices: same seed, same batches and augmentation, same lr schedule
# (over 20 steps); the CPU stops after 10.
resnet=(resnet --model resnet20 --data "$CARRY/fashion-mnist" --precision f16 --batch 128 --epochs 1
        --limit-train 2560 --limit-test 1000 --workers 4 --seed 1 --log-every 5)
t0=$SECONDS
logged resnet-cuda 150 "$train" "${resnet[@]}" --device cuda --metrics "$logdir/resnet-cuda.csv"; rc_cuda=$?
logged resnet-cpu 150 "$train" "${resnet[@]}" --device cpu --stop-after-steps 10 --metrics "$logdir/resnet-cpu.csv"; rc_cpu=$?
if (( rc_cuda == 0 && rc_cpu == 0 )); then
  verdict=$(python3 - "$logdir/resnet-cpu.csv" "$logdir/resnet-cuda.csv" <<'PY'
import csv, sys
cpu = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
gpu = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[2]))]
bad = [i + 1 for i in range(10) if abs(gpu[i] - cpu[i]) > 0.03 * cpu[i] + 0.02] if len(cpu) >= 10 and len(gpu) >= 20 else ["too few steps"]
first, last = sum(gpu[:5]) / 5, sum(gpu[15:20]) / 5
worst = max(abs(g - c) for g, c in zip(gpu[:10], cpu[:10]))
ok = not bad and last < 0.9 * first
print(("ok" if ok else "FAIL") + f"|10 losses within 0.03*cpu+0.02 (worst {worst:.4f}{', off at steps ' + str(bad) if bad else ''}); "
      f"loss {first:.3f} -> {last:.3f}")
PY
)
  row "resnet20 f16 cuda vs cpu" "${verdict%%|*}" "${verdict#*|}; $((SECONDS - t0)) s"
else
  row "resnet20 f16 cuda vs cpu" FAIL "precis-train exit cuda $rc_cuda, cpu $rc_cpu; see resnet-*.log"
fi

step "BERT-mini: 200 steps on cuda (f16 AMP)"
t0=$SECONDS
if logged bert 150 "$train" bert-mini --device cuda --data "$CARRY/text/corpus.txt.gz" --vocab "$BUILD_DIR/gpu-vocab.txt" \
     --vocab-size 8192 --batch 32 --max-len 128 --stop-after-steps 200 --limit-test 256 --workers 4 --log-every 50 \
     --metrics "$logdir/bert.csv"; then
  verdict=$(python3 - "$logdir/bert.csv" <<'PY'
import csv, math, sys
loss = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
ok = len(loss) == 200 and all(math.isfinite(v) for v in loss) and sum(loss[-20:]) < sum(loss[:20])
print(("ok" if ok else "FAIL") + f"|{len(loss)} steps, loss {sum(loss[:20]) / 20:.3f} (first 20) -> {sum(loss[-20:]) / 20:.3f} (last 20)")
PY
)
  row "bert-mini 200 steps cuda" "${verdict%%|*}" "${verdict#*|}; $((SECONDS - t0)) s"
else
  row "bert-mini 200 steps cuda" FAIL "see bert.log"
fi

step "benchmark: precis-bench models --device cuda; PyTorch peer"
t0=$SECONDS
if logged bench-precis 150 "$BUILD_DIR/benchmarks/precis-bench" models --device cuda --no-peak --repeat 20 --min-time 1 \
     --json "$logdir/bench-precis.json"; then
  row "precis-bench models --device cuda" ok "$((SECONDS - t0)) s"
else
  row "precis-bench models --device cuda" FAIL "see bench-precis.log"
fi
t0=$SECONDS
if logged bench-torch 150 python3 benchmarks/peers/torch_models.py --device cuda --repeat 20 --min-time 1 \
     --json "$logdir/bench-torch.json"; then
  row "torch_models.py --device cuda" ok "$((SECONDS - t0)) s"
else
  row "torch_models.py --device cuda" FAIL "see bench-torch.log"
fi
# One line per (case, dtype): step time, throughput, peak device memory, precis and torch.
if [[ -s "$logdir/bench-precis.json" || -s "$logdir/bench-torch.json" ]]; then
  while IFS= read -r line; do row "${line%%|*}" "" "${line#*|}"; done < <(python3 - "$logdir"/bench-*.json <<'PY'
import json, sys
recs = {}
for p in sys.argv[1:]:
    try:
        for r in json.load(open(p)):
            recs[(r["case"], r["dtype"], r["impl"])] = r
    except (OSError, ValueError):
        pass
for case, dtype in sorted({(c, d) for c, d, _ in recs}):
    parts = []
    for impl in ("precis", "torch"):
        r = recs.get((case, dtype, impl))
        if r:
            rate = next((f"{v:.0f} {k[:-6]}/s" for k, v in r.items() if k.endswith("_per_s")), "")
            parts.append(f"{impl} {r['median_ms']:.1f} ms, {rate}, {r.get('peak_device_mb', 0):.0f} MiB")
    print(f"  {case} {dtype}|" + "; ".join(parts))
PY
)
fi

finish
