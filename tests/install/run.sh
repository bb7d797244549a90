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
echo "== $mode consumer OK"
