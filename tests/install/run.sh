#!/usr/bin/env bash
# Packaging test, run by ctest (tests/CMakeLists.txt). Two modes:
#
#   run.sh package      <build-dir> <source-dir> <work-dir> <c++-compiler>
#       cmake --install the already-built tree into <work-dir>/prefix, then configure, build and
#       run tests/install/consumer against it with find_package(precis).
#   run.sh subdirectory <build-dir> <source-dir> <work-dir> <c++-compiler>
#       configure the consumer with add_subdirectory(<source-dir>) (tests, benchmarks and CUDA
#       off) and build only the consumer, which compiles the library afresh in <work-dir>.
set -euo pipefail
# The consumer is compiled without ccache: main.cpp picks its header with __has_include, and
# ccache's direct mode would replay an old result after precis.h appears.

mode=$1 build_dir=$2 source_dir=$3 work_dir=$4 cxx=$5
consumer_src="$source_dir/tests/install/consumer"
cmake=${CMAKE_COMMAND:-cmake}
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

step() { echo "== $*"; }
run_logged() {  # run quietly; show the log when the command fails
  local log=$1; shift
  if ! "$@" >"$log" 2>&1; then
    echo "FAILED: $*"; cat "$log"; exit 1
  fi
}

mkdir -p "$work_dir"
case "$mode" in
  package)
    prefix="$work_dir/prefix" cbuild="$work_dir/consumer-package"
    rm -rf "$prefix" "$cbuild"
    step "cmake --install $build_dir --prefix $prefix"
    run_logged "$work_dir/install.log" "$cmake" --install "$build_dir" --prefix "$prefix"
    grep -E 'public headers|Not installing' "$work_dir/install.log" || true
    step "configure the consumer with find_package(precis), CMAKE_PREFIX_PATH=$prefix"
    run_logged "$work_dir/consumer-package-configure.log" "$cmake" -S "$consumer_src" -B "$cbuild" \
      "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_PREFIX_PATH="$prefix" -DPRECIS_CONSUMER_MODE=package
    grep '^-- consumer:' "$work_dir/consumer-package-configure.log" || true
    ;;
  subdirectory)
    cbuild="$work_dir/consumer-subdirectory"
    rm -rf "$cbuild"
    step "configure the consumer with add_subdirectory($source_dir)"
    run_logged "$work_dir/consumer-subdirectory-configure.log" "$cmake" -S "$consumer_src" -B "$cbuild" \
      "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
      -DPRECIS_CONSUMER_MODE=subdirectory -DPRECIS_SOURCE_DIR="$source_dir" \
      -DPRECIS_BUILD_TESTS=OFF -DPRECIS_BUILD_BENCHMARKS=OFF -DPRECIS_CUDA=OFF
    ;;
  *) echo "usage: $0 package|subdirectory <build-dir> <source-dir> <work-dir> <c++-compiler>" >&2; exit 2 ;;
esac

step "build the consumer"
run_logged "$work_dir/consumer-$mode-build.log" "$cmake" --build "$cbuild" --target consumer
step "run the consumer"
out=$("$cbuild/consumer")
echo "$out"
grep -q 'dtype_name(DType::bf16) = bf16' <<<"$out" || { echo "unexpected consumer output"; exit 1; }

# A CUDA device: a GPU here gives "ok"; otherwise one DeviceError that says why.
step "ask the consumer for a CUDA device"
cuda_out=$("$cbuild/consumer" --cuda) || { echo "$cuda_out"; echo "consumer --cuda failed"; exit 1; }
echo "$cuda_out"

if [[ $mode == package ]]; then
  # The shared library links no CUDA library, whatever the install holds: libprecis.so opens the
  # backend at run time.
  step "ldd: the consumer and libprecis.so link no CUDA library"
  cuda_libs=$(ldd "$cbuild/consumer" | grep -E 'libcuda|libcudart|libcublas|libcudnn|libnccl|libprecis_cuda' || true)
  [[ -z $cuda_libs ]] || { echo "the consumer links CUDA libraries:"; echo "$cuda_libs"; exit 1; }
  echo "none"

  if compgen -G "$prefix/lib*/libprecis_cuda.so*" >/dev/null; then
    # The machine without CUDA, simulated: a backend whose dependency is missing must give the
    # loader's reason, not a crash (scripts/fresh-machine-test.sh runs the real thing).
    step "a CUDA backend that cannot be loaded (its dependency is gone)"
    fake="$work_dir/fake-backend"
    rm -rf "$fake" && mkdir -p "$fake"
    echo 'int precis_gone() { return 1; }' >"$fake/gone.cpp"
    echo 'int precis_gone(); extern "C" int precis_fake() { return precis_gone(); }' >"$fake/fake.cpp"
    "$cxx" -shared -fPIC -o "$fake/libprecis_gone.so" "$fake/gone.cpp"
    "$cxx" -shared -fPIC -o "$fake/libprecis_cuda_fake.so" "$fake/fake.cpp" -L"$fake" -lprecis_gone
    rm "$fake/libprecis_gone.so"
    gone_out=$(PRECIS_CUDA_BACKEND="$fake/libprecis_cuda_fake.so" "$cbuild/consumer" --cuda) ||
      { echo "$gone_out"; echo "consumer --cuda crashed on a backend that cannot load"; exit 1; }
    echo "$gone_out"
    grep -q 'cuda: DeviceError: cuda:0 is not available: the CUDA backend .* could not be loaded (libprecis_gone.so' \
      <<<"$gone_out" || { echo "expected the loader's reason"; exit 1; }

    # libprecis.a holds no CUDA: a static program runs, and asking it for CUDA says why not.
    step "a consumer of precis::precis_static (find_package COMPONENTS static)"
    sbuild="$work_dir/consumer-static"
    rm -rf "$sbuild"
    run_logged "$work_dir/consumer-static-configure.log" "$cmake" -S "$consumer_src" -B "$sbuild" \
      "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_PREFIX_PATH="$prefix" -DPRECIS_CONSUMER_MODE=package -DPRECIS_CONSUMER_STATIC=ON
    run_logged "$work_dir/consumer-static-build.log" "$cmake" --build "$sbuild" --target consumer
    "$sbuild/consumer" | grep -q 'dtype_name(DType::bf16) = bf16' || { echo "the static consumer did not run"; exit 1; }
    static_out=$("$sbuild/consumer" --cuda) || { echo "$static_out"; exit 1; }
    echo "$static_out"
    grep -q 'static libprecis.a' <<<"$static_out" || { echo "expected the static-library reason"; exit 1; }
  fi
fi
echo "== $mode consumer OK"
