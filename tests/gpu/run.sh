#!/usr/bin/env bash
# The GPU check: binaries built here, run on the GPU machine (one H200, sm_90, CUDA 13 driver;
# PyTorch with the cuDNN, NCCL and cuBLAS wheels; no network, no MPI, Eigen, Catch2 or oneDNN).
#
#   tests/gpu/run.sh --prepare [DIR]   here: build the GPU binaries (BUILD_DIR, configured with the
#                                      settings below when it is not configured yet), and fill DIR
#                                      (.gpu-carry) with the bundle (the executables, stripped, and
#                                      every non-system library they load), the data, and the
#                                      .debs of a fallback build
#   tests/gpu/run.sh                   on the GPU machine: the check below
#   tests/gpu/run.sh --dry-run         here or in CI, no GPU: the GPU side against a fake GPU layer,
#                                      proving that every kind of fault fails the check
#   tests/gpu/run.sh --check           CI: syntax, the strict switch, the GPU benchmarks refusing a
#                                      machine without a GPU, then --dry-run
#
# The device call (docs/gpu.md; /work/.library/device/README.md), after `--prepare` here:
#
#   run(command="bash tests/gpu/run.sh", carry=[".gpu-carry"], timeout_s=480)
#
# Settings of the bundle's build: Release, -DPRECIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 (sm_90
# SASS + compute_90 PTX), -DPRECIS_CUDNN=ON -DPRECIS_NCCL=ON -DPRECIS_MPI=OFF. A build with MPI
# (CI's) bundles libmpi and what it loads too: nothing calls MPI_Init outside a distributed run.
#
# On the GPU machine, in priority order under one budget (BUDGET_S), each step with its own limit:
#   1. the bundle: unpacked, LD_LIBRARY_PATH = its lib/ + the nvidia/{cu13,cudnn,nccl}/lib folders
#      of the python3 that holds PyTorch + /usr/local/cuda/lib64; every executable probed with ldd
#      (a missing library: build there from the carried .debs instead, the slow path)
#   2. every [cuda] test of every test executable with PRECIS_REQUIRE_GPU=1 (a skip is a failure)
#      and Catch2's --warn NoTests (a filter matching nothing is a failure); beside them, in
#      parallel, compute-sanitizer memcheck over precis_cuda_tests with PRECIS_CUDA_ALLOCATOR=direct
#      (each tensor its own cudaMalloc, so an overrun is seen) — then racecheck over the tests
#      listed in tests/gpu/racecheck_tests.txt
#   3. ResNet-20 f16 on the Fashion-MNIST subset, cuda against the CPU from one seed
#   4. BERT-mini on cuda, f16 AMP and bf16 autocast
#   5. precis-bench models --device cuda and benchmarks/peers/torch_models.py --device cuda
# Every row and log lands in $OUT as it is made (gpu-check-rows.txt, gpu-check.log); at the end the
# table (gpu-check.txt) and the benchmark JSON. A row is ok, FAIL or TIMEOUT (cut by its limit);
# anything but ok fails the check (exit 1), a step the budget left no time for included.
#
# Environment: BUILD_DIR (build-gpu), CUDA_ARCH (90), JOBS (nproc), PRECIS_GPU_CARRY (.gpu-carry),
# BUDGET_S (420), TORCH_PYTHON (python3).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

BUILD_DIR=${BUILD_DIR:-build-gpu}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
CARRY=${PRECIS_GPU_CARRY:-.gpu-carry}
BUDGET_S=${BUDGET_S:-420}
TORCH_PYTHON=${TORCH_PYTHON:-python3}
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH=$PATH:/usr/local/cuda/bin

# Debian packages of a fallback build on the GPU machine (headers, CMake packages; libdnnl2 is
# oneDNN's library, which needs the OpenCL loader).
DEBS=(libeigen3-dev catch2 zlib1g-dev libcli11-dev libdnnl-dev libdnnl2 ocl-icd-libopencl1 ocl-icd-opencl-dev
      opencl-c-headers)
FASHION_TRAIN=5120   # examples of the carried Fashion-MNIST subset
FASHION_TEST=1000
GLOSS_LINES=25600    # lines of the carried text corpus (24320 training lines: 760 steps of 32)
TOOLS=(precis-train precis-bench)
# Libraries the GPU machine has (its system, or the PyTorch wheels' nvidia/*/lib, or the driver):
# never bundled. Everything else an executable loads travels with it.
SYSTEM_LIBS='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libutil|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn.*|libnccl|libnvrtc.*|libnvJitLink)\.so'

# shellcheck source=tests/gpu/steps.sh
source "$ROOT/tests/gpu/steps.sh"

# ---- here: the bundle ------------------------------------------------------------------------------
# The test executables that hold [cuda] tests: precis_<folder>_tests for each tests/<folder>/ with a
# "[cuda]" tag (tests/dist runs under mpirun and is not bundled).
cuda_test_targets() {
  grep -rl --include='*.cpp' '"[^"]*\[cuda\][^"]*"' tests | cut -d/ -f2 | sort -u | grep -vx dist |
    sed 's/.*/precis_&_tests/'
}

configure_gpu_build() {  # DIR
  local cfg=(cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Release -DPRECIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH"
             -DPRECIS_CUDNN=ON -DPRECIS_NCCL=ON -DPRECIS_MPI=OFF)
  command -v ninja >/dev/null 2>&1 && cfg+=(-G Ninja)
  echo "${cfg[*]}"
  "${cfg[@]}"
}

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
write_text_corpus() {  # DEST_FILE WORDNET_DIR
  python3 - "$1" "$GLOSS_LINES" "$ROOT" "$2" <<'PY'
import glob, gzip, os, sys
dest, n, root, wordnet = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
lines = []
for part in ("noun", "verb", "adj", "adv"):
    p = f"{wordnet}/data.{part}"
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

# Copies each executable (stripped) into STAGE/bin and every library it loads that the GPU machine
# does not have into STAGE/lib (found by ldd, so a new dependency cannot be forgotten).
stage_bundle() {  # STAGE EXE...
  local stage=$1 exe lib name missing=0; shift
  mkdir -p "$stage/bin" "$stage/lib"
  for exe in "$@"; do
    # A library given here (the CUDA backend, which nothing links: libprecis.so opens it) goes to
    # lib/ under its file name, the soname the loader asks for; its own libraries follow it.
    if [[ "$exe" == *.so* ]]; then
      cp -L "$exe" "$stage/lib/$(basename "$exe")" || return 1
    else
      cp "$exe" "$stage/bin/" && strip --strip-unneeded "$stage/bin/$(basename "$exe")" || return 1
    fi
    while read -r name lib; do
      if [[ "$lib" == "not found" ]]; then echo "ldd: $exe: $name not found here"; missing=1; continue; fi
      [[ "$name" =~ $SYSTEM_LIBS ]] && continue
      [[ -e "$stage/lib/$name" ]] || cp -L "$lib" "$stage/lib/$name"
    done < <(ldd "$exe" | sed -n 's/^\s*\(\S*\) => \(.*\) (0x.*)$/\1 \2/p; s/^\s*\(\S*\) => not found$/\1 not found/p')
  done
  strip --strip-unneeded "$stage"/lib/*.so* 2>/dev/null
  return $missing
}

prepare() {  # DIR
  local dir=$1 fashion=/usr/share/datasets/fashion-mnist tmp ftmp="" t0=$SECONDS
  mkdir -p "$dir/debs" "$dir/fashion-mnist" "$dir/text"
  [[ -f "$BUILD_DIR/build.ninja" || -f "$BUILD_DIR/Makefile" ]] || configure_gpu_build "$BUILD_DIR" || return 1
  grep -qs 'PRECIS_HAS_CUDA=1' "$BUILD_DIR/build.ninja" "$BUILD_DIR/CMakeFiles/Makefile2" ||
    grep -rqs 'PRECIS_HAS_CUDA=1' "$BUILD_DIR/CMakeFiles/precis.dir/flags.make" ||
    { echo "$BUILD_DIR is not a CUDA build (no PRECIS_HAS_CUDA): configure it with -DPRECIS_CUDA=ON"; return 1; }
  mapfile -t tests < <(cuda_test_targets)
  echo "-- build: ${tests[*]} ${TOOLS[*]}"
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${tests[@]}" "${TOOLS[@]}" precis_cuda || return 1
  local exes=()
  for t in "${tests[@]}"; do exes+=("$BUILD_DIR/tests/$t"); done
  exes+=("$BUILD_DIR/models/tools/precis-train" "$BUILD_DIR/benchmarks/precis-bench")
  exes+=("$BUILD_DIR/libprecis_cuda.so.$(sed -n 's/^CMAKE_PROJECT_VERSION_MAJOR:STATIC=//p' "$BUILD_DIR/CMakeCache.txt")")
  tmp=$(mktemp -d)
  echo "-- bundle: ${#exes[@]} executables and the libraries they load"
  stage_bundle "$tmp/bundle" "${exes[@]}" || { rm -rf "$tmp"; return 1; }
  ls "$tmp/bundle/lib"
  # One xz stream with a dictionary larger than an executable: the executables share most of their
  # bytes (the same static library and CUDA fatbins), which a large window stores once.
  tar -C "$tmp" -cf - bundle | xz -T1 --lzma2=preset=6,dict=192MiB >"$dir/bundle.tar.xz" || { rm -rf "$tmp"; return 1; }
  rm -rf "$tmp"
  echo "-- .debs of the fallback build: ${DEBS[*]}"
  (cd "$dir/debs" && rm -f ./*.deb && apt-get download "${DEBS[@]}") || { echo "apt-get download failed"; return 1; }
  if [[ ! -e "$fashion/train-images-idx3-ubyte.gz" && ! -e "$fashion/train-images-idx3-ubyte" ]]; then
    echo "-- Fashion-MNIST is not installed: taking it from the package dataset-fashion-mnist"
    ftmp=$(mktemp -d)
    (cd "$ftmp" && apt-get download dataset-fashion-mnist && dpkg-deb -x dataset-fashion-mnist_*.deb root) || {
      echo "cannot get dataset-fashion-mnist"; rm -rf "$ftmp"; return 1; }
    fashion="$ftmp/root/usr/share/datasets/fashion-mnist"
  fi
  write_fashion_subset "$fashion" "$dir/fashion-mnist" || return 1
  [[ -n "$ftmp" ]] && rm -rf "$ftmp"
  local wordnet=/usr/share/wordnet wtmp=""
  if [[ ! -e "$wordnet/data.noun" ]]; then
    echo "-- WordNet is not installed: taking its glosses from the package wordnet-base"
    wtmp=$(mktemp -d)
    (cd "$wtmp" && apt-get download wordnet-base && dpkg-deb -x wordnet-base_*.deb root) || {
      echo "cannot get wordnet-base"; rm -rf "$wtmp"; return 1; }
    wordnet="$wtmp/root/usr/share/wordnet"
  fi
  echo -n "-- text corpus: "
  write_text_corpus "$dir/text/corpus.txt.gz" "$wordnet" || return 1
  [[ -n "$wtmp" ]] && rm -rf "$wtmp"
  git rev-parse HEAD >"$dir/commit" 2>/dev/null
  local kib repo_kib
  kib=$(du -sk "$dir" | cut -f1)
  repo_kib=$(( $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) / 1024 ))
  echo "-- $dir: $((kib / 1024)) MiB (bundle $(( $(stat -c %s "$dir/bundle.tar.xz") / 1048576 )) MiB) + repository" \
       "$((repo_kib / 1024)) MiB; prepared in $((SECONDS - t0)) s"
  if (( kib + repo_kib >= 60 * 1024 )); then echo "over the 64 MiB a device call carries"; return 1; fi
}

# ---- CI: what needs no GPU ---------------------------------------------------------------------------
check() {
  local t0=$SECONDS exe bench out rc
  step "syntax"
  if bash -n "$0" && bash -n tests/gpu/steps.sh && bash -n tests/gpu/dry_run.sh && bash -n tests/gpu/strict_switch_test.sh &&
     python3 -m py_compile benchmarks/peers/torch_models.py benchmarks/peers/peer_common.py; then
    row "syntax (bash -n, py_compile)" ok "run.sh, steps.sh, dry_run.sh, strict_switch_test.sh, torch_models.py"
  else
    row "syntax (bash -n, py_compile)" FAIL "see above"
  fi

  step "the strict switch (PRECIS_REQUIRE_GPU=1 turns a skip into a failure)"
  exe=""
  for d in "${CHECK_BUILD_DIR:-build}" "$BUILD_DIR"; do
    [[ -x "$d/tests/precis_cuda_tests" ]] && { exe="$d/tests/precis_cuda_tests"; break; }
  done
  if [[ -z "$exe" ]]; then
    row "strict switch" FAIL "no precis_cuda_tests built (cmake --build build --target precis_cuda_tests)"
  elif bash tests/gpu/strict_switch_test.sh "$exe"; then
    row "strict switch" ok "$exe: skip without, failure with PRECIS_REQUIRE_GPU=1"
  else
    row "strict switch" FAIL "$exe: see above"
  fi

  step "the GPU benchmarks refuse a machine without a GPU"
  bench=""
  for d in "${CHECK_BUILD_DIR:-build}" "$BUILD_DIR"; do
    [[ -x "$d/benchmarks/precis-bench" ]] && { bench="$d/benchmarks/precis-bench"; break; }
  done
  if [[ -z "$bench" ]]; then
    row "precis-bench --device cuda (no GPU)" FAIL "no precis-bench built"
  elif nvidia-smi >/dev/null 2>&1; then
    row "precis-bench --device cuda (no GPU)" FAIL "this machine has a GPU: run the check itself"
  else
    out=$("$bench" models --device cuda --repeat 1 --no-peak 2>&1); rc=$?
    echo "$out" | tail -3
    if (( rc == 1 )) && grep -q "cuda:0" <<<"$out"; then
      row "precis-bench --device cuda (no GPU)" ok "exit 1 naming cuda:0"
    else
      row "precis-bench --device cuda (no GPU)" FAIL "exit $rc; expected 1 with a message naming cuda:0"
    fi
  fi
  out=$(python3 benchmarks/peers/torch_models.py --device cuda --repeat 1 2>&1); rc=$?
  echo "$out" | tail -2
  if (( rc != 0 )); then
    row "torch_models.py --device cuda (no GPU)" ok "exit $rc: $(tail -1 <<<"$out" | cut -c1-70)"
  else
    row "torch_models.py --device cuda (no GPU)" FAIL "exit 0 without a GPU"
  fi

  step "the GPU side against a fake GPU layer (tests/gpu/dry_run.sh)"
  if bash tests/gpu/dry_run.sh; then
    row "dry run" ok "every fault fails the check; a clean fake run passes"
  else
    row "dry run" FAIL "see above"
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
  --dry-run) exec bash tests/gpu/dry_run.sh ;;
  "") gpu_check ;;
  *) echo "usage: tests/gpu/run.sh [--prepare [DIR] | --check | --dry-run]" >&2; exit 2 ;;
esac
