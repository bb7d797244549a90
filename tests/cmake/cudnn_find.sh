#!/usr/bin/env bash
# Checks how cmake/precis_cudnn.cmake finds cuDNN, without a GPU: in the CUDA toolkit (the default),
# under PRECIS_CUDNN_ROOT, and in the site-packages of PRECIS_CUDNN_PYTHON laid out as PyTorch's
# nvidia-cudnn wheel (include/ and lib/ with libcudnn.so.9 only, no libcudnn.so link). The fake
# trees link to the toolkit's real header and library.
#
#   cudnn_find.sh SOURCE_DIR WORK_DIR CUDNN_INCLUDE_DIR CUDNN_LIBRARY
set -euo pipefail
src=$1 work=$2 real_include=$3 real_library=$4
cmake=${CMAKE_COMMAND:-cmake}
rm -rf "$work"
mkdir -p "$work"

# A wheel's layout under a fake site-packages.
site=$work/site-packages
mkdir -p "$site/nvidia/cudnn/include" "$site/nvidia/cudnn/lib"
ln -s "$real_include/cudnn.h" "$real_include/cudnn_version.h" "$site/nvidia/cudnn/include/"
ln -s "$(readlink -f "$real_library")" "$site/nvidia/cudnn/lib/libcudnn.so.9"
# A Python that reports that site-packages (only sysconfig's purelib/platlib query is asked).
printf '#!/bin/sh\necho %s\necho %s\n' "$site" "$site" > "$work/fake-python"
chmod +x "$work/fake-python"

probe() {  # probe NAME EXPECTED_LIBRARY_PREFIX CMAKE_ARGS...
  local name=$1 expected=$2
  shift 2
  local out
  out=$("$cmake" -S "$src/tests/cmake/cudnn_find" -B "$work/build-$name" -DPRECIS_SOURCE_DIR="$src" "$@" 2>&1) || {
    echo "FAIL $name: configure failed"; echo "$out"; exit 1; }
  local line
  line=$(grep 'probe: ' <<<"$out")
  if [[ $line != *"with=ON"* || $line != *"library=$expected"* ]]; then
    echo "FAIL $name: expected a cuDNN library under $expected"; echo "$out"; exit 1
  fi
  echo "ok $name: $line"
}

probe toolkit "$real_library"
probe root "$site/nvidia/cudnn/lib/libcudnn.so.9" -DPRECIS_CUDNN_ROOT="$site/nvidia/cudnn"
probe python "$site/nvidia/cudnn/lib/libcudnn.so.9" -DPRECIS_CUDNN_PYTHON="$work/fake-python"

# A Python that does not run is a configure error naming the variable.
if out=$("$cmake" -S "$src/tests/cmake/cudnn_find" -B "$work/build-bad" -DPRECIS_SOURCE_DIR="$src" \
         -DPRECIS_CUDNN_PYTHON=/nonexistent/python 2>&1); then
  echo "FAIL bad-python: configure passed"; echo "$out"; exit 1
fi
grep -q "PRECIS_CUDNN_PYTHON=/nonexistent/python did not run" <<<"$out" || {
  echo "FAIL bad-python: no message naming the variable"; echo "$out"; exit 1; }
echo "ok bad-python"
# PRECIS_CUDNN=ON with a root that has no cuDNN and no toolkit copy to fall back to is an error;
# AUTO goes on without it.
mkdir -p "$work/empty"
if out=$("$cmake" -S "$src/tests/cmake/cudnn_find" -B "$work/build-missing" -DPRECIS_SOURCE_DIR="$src" \
         -DPRECIS_CUDNN=ON -DPRECIS_CUDNN_ROOT="$work/empty" -DPROBE_NO_TOOLKIT=ON 2>&1); then
  echo "FAIL missing: configure passed"; echo "$out"; exit 1
fi
grep -q "PRECIS_CUDNN=ON but cuDNN >= 9 was not found" <<<"$out" || {
  echo "FAIL missing: no message"; echo "$out"; exit 1; }
echo "ok missing"
if ! out=$("$cmake" -S "$src/tests/cmake/cudnn_find" -B "$work/build-auto" -DPRECIS_SOURCE_DIR="$src" \
           -DPRECIS_CUDNN_ROOT="$work/empty" -DPROBE_NO_TOOLKIT=ON 2>&1); then
  echo "FAIL auto: configure failed"; echo "$out"; exit 1
fi
grep -q "probe: with=OFF" <<<"$out" || { echo "FAIL auto: cuDNN reported found"; echo "$out"; exit 1; }
echo "ok auto"
