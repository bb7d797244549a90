#!/usr/bin/env bash
# The GPU check, run on the GPU machine (an H200, sm_90) from the repository root:
#
#   tests/gpu/run.sh            configure + build with CUDA, run the [cuda] tests, the CUDA
#                               matmul benchmark when precis-bench exists, print a summary
#
# Environment: BUILD_DIR (build-gpu), CUDA_ARCH (90), JOBS (nproc), PRECIS_GPU_DEBS (.gpu-debs).
#
# Which tests: Catch2 v2 cannot turn tags into ctest labels, so each test executable is run
# directly with the "[cuda]" tag filter; precis_cuda_tests (tests/cuda/) is run whole.
# Without a GPU the [cuda] tests skip themselves, so this also runs (uselessly) on a CPU machine.
#
# That machine has nvcc and CMake but no Debian build dependencies and no network. Carry the
# header-only ones as .deb files, prepared here once:
#   echo /.gpu-debs/ >> .git/info/exclude
#   mkdir -p .gpu-debs && (cd .gpu-debs && apt-get download libeigen3-dev catch2)
# and pass carry: [".gpu-debs"] to the device run. They are unpacked under build-gpu/ (not /).
# oneDNN is used when its CMake package is found, else the build goes on with PRECIS_ONEDNN=OFF
# (the CPU GEMM falls back to Eigen; nothing here tests it).
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD_DIR=${BUILD_DIR:-build-gpu}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
DEBS=${PRECIS_GPU_DEBS:-.gpu-debs}
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH=/usr/local/cuda/bin:$PATH

summary=()   # rows: "step|result|detail"
failed=0
row() { summary+=("$1|$2|$3"); }
step() { echo; echo "== $*"; }
print_summary() {
  echo
  echo "== summary"
  printf '%-34s %-8s %s\n' "step" "result" "detail"
  printf '%-34s %-8s %s\n' "----" "------" "------"
  local r
  for r in "${summary[@]}"; do
    IFS='|' read -r a b c <<<"$r"
    printf '%-34s %-8s %s\n' "$a" "$b" "$c"
  done
}
on_exit() {
  local rc=$?
  if (( rc != 0 )); then row "(stopped early)" "FAIL" "exit status $rc; see the output above"; print_summary; fi
}
trap on_exit EXIT

step "machine"
echo "cpus: $(nproc)"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader || true
else
  echo "nvidia-smi: not found (no GPU driver?)"
fi
command -v nvcc >/dev/null 2>&1 || { echo "nvcc not found: the GPU check needs the CUDA toolkit"; exit 1; }
nvcc --version | tail -1
cmake --version | head -1
echo "c++: $(c++ --version | head -1)"

# ---- dependencies: system packages, else the carried .deb files --------------------------------
prefix_path=()
deps_root="$BUILD_DIR/_deps-root"
if compgen -G "$DEBS/*.deb" >/dev/null; then
  step "unpacking carried packages from $DEBS into $deps_root"
  mkdir -p "$deps_root"
  for deb in "$DEBS"/*.deb; do
    if command -v dpkg >/dev/null 2>&1; then
      dpkg -x "$deb" "$deps_root"
    else  # no dpkg: a .deb is an ar archive holding data.tar.*
      tmp=$(mktemp -d); (cd "$tmp" && ar x "$OLDPWD/$deb")
      tar -xf "$tmp"/data.tar.* -C "$deps_root"; rm -rf "$tmp"
    fi
    echo "  $(basename "$deb")"
  done
  prefix_path+=("$(cd "$deps_root" && pwd)/usr")
fi
onednn=ON
if [[ -z "$(find /usr /opt -maxdepth 6 \( -name dnnl-config.cmake -o -name dnnlConfig.cmake \) \
            -print -quit 2>/dev/null)" ]]; then
  onednn=OFF
  echo "oneDNN's CMake package not found: building with PRECIS_ONEDNN=OFF"
fi

# ---- configure and build -----------------------------------------------------------------------
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
configure=(cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
           -DPRECIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DPRECIS_ONEDNN="$onednn")
if (( ${#prefix_path[@]} )); then
  configure+=("-DCMAKE_PREFIX_PATH=$(IFS=';'; echo "${prefix_path[*]}")")
fi
step "configure: ${configure[*]}"
t0=$SECONDS
"${configure[@]}"
row "configure" "ok" "sm_$CUDA_ARCH, oneDNN $onednn, $((SECONDS - t0)) s"

step "build: cmake --build $BUILD_DIR -j $JOBS"
t0=$SECONDS
cmake --build "$BUILD_DIR" -j "$JOBS"
row "build" "ok" "$((SECONDS - t0)) s"

# ---- [cuda] tests ------------------------------------------------------------------------------
step "tests"
shopt -s nullglob
exes=("$BUILD_DIR"/tests/precis_*_tests)
if (( ${#exes[@]} == 0 )); then
  echo "no test executables under $BUILD_DIR/tests"
  row "tests" "skip" "no test executables yet"
fi
for exe in "${exes[@]}"; do
  name=$(basename "$exe")
  filter=("[cuda]")
  [[ "$name" == precis_cuda_tests ]] && filter=()
  # Catch2 v2 exits with the number listed: capture the list, ignore the status.
  n=$("$exe" --list-test-names-only "${filter[@]}" 2>/dev/null | grep -c . || true)
  label="$name ${filter[*]:-(all)}"
  if (( n == 0 )); then
    row "$label" "skip" "no matching tests"
    continue
  fi
  echo "-- $exe ${filter[*]}  ($n test cases)"
  t0=$SECONDS
  if "$exe" "${filter[@]}"; then
    row "$label" "pass" "$n test cases, $((SECONDS - t0)) s"
  else
    row "$label" "FAIL" "$n test cases, $((SECONDS - t0)) s"
    failed=1
  fi
done

# ---- benchmark ---------------------------------------------------------------------------------
bench="$BUILD_DIR/benchmarks/precis-bench"
step "benchmark: $bench matmul --device cuda"
if [[ -x "$bench" ]]; then
  t0=$SECONDS
  if timeout 300 "$bench" matmul --device cuda; then
    row "precis-bench matmul --device cuda" "ok" "$((SECONDS - t0)) s (figures above)"
  else
    row "precis-bench matmul --device cuda" "FAIL" "exit status $?"
    failed=1
  fi
else
  echo "not built yet: skipped"
  row "precis-bench matmul --device cuda" "skip" "precis-bench not built yet"
fi

trap - EXIT
print_summary
if (( failed )); then echo "GPU check FAILED"; exit 1; fi
echo "GPU check passed"
