#!/usr/bin/env bash
# Compiles every precis source that uses oneDNN against oneDNN 3.x's headers, with the flags of an
# existing build, so that the 3.x side of ops/cpu/onednn_compat.h keeps building although the
# default build uses Debian 12's oneDNN 2.6 (docs/design/cpu-gemm.md, "oneDNN versions").
#
#   scripts/onednn3-check.sh [BUILD_DIR]     (default: build; needs its compile_commands.json)
#
# The headers come from PyPI's onednn-devel-cpu-gomp 2023.2.0 (oneDNN 3.2.0, the newest GNU-OpenMP
# build there), fetched with pip and checked against the pinned SHA-256 below. Compile only
# (-fsyntax-only): running against 3.2 was measured by hand (benchmarks/results/
# onednn-2026-12-05-amx.md). Exits non-zero on the first file that does not compile.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${1:-build}
wheel=onednn_devel_cpu_gomp-2023.2.0-py2.py3-none-manylinux1_x86_64.whl
sha256=9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284
cache=${ONEDNN3_CACHE:-$build_dir/onednn3-headers}

say() { echo "onednn3-check: $*"; }
die() { echo "onednn3-check: error: $*" >&2; exit 1; }

[[ -f $build_dir/compile_commands.json ]] ||
  die "$build_dir/compile_commands.json not found: configure a build first (make build)"

if [[ ! -f $cache/include/oneapi/dnnl/dnnl.hpp ]]; then
  python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip is missing (Debian: apt-get install python3-pip)"
  mkdir -p "$cache"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$cache" onednn-devel-cpu-gomp==2023.2.0 ||
    die "could not download onednn-devel-cpu-gomp 2023.2.0 from PyPI"
  echo "$sha256  $cache/$wheel" | sha256sum --check --quiet || die "$wheel: SHA-256 mismatch"
  python3 - "$cache/$wheel" "$cache" <<'EOF'
import sys, zipfile
prefix = "onednn_devel_cpu_gomp-2023.2.0.data/data/"
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.startswith(prefix + "include/"):
            target = sys.argv[2] + "/" + name[len(prefix):]
            import os
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(z.read(name))
EOF
fi
cache=$(cd "$cache" && pwd)  # absolute: the compilers below run in the build's folders
grep -q '#define DNNL_VERSION_MAJOR 3' "$cache/include/oneapi/dnnl/dnnl_version.h" ||
  die "$cache/include holds no oneDNN 3.x headers"

# Every translation unit of the build that includes oneDNN, directly or through ops/cpu's headers,
# recompiled with the 3.x headers searched first.
python3 - "$build_dir/compile_commands.json" "$cache/include" <<'EOF'
import json, re, shlex, subprocess, sys
commands, include = sys.argv[1], sys.argv[2]
uses = re.compile(r'#include\s*[<"](oneapi/dnnl/|ops/cpu/onednn_compat\.h|ops/cpu/onednn_util\.h)')
checked = 0
for entry in json.load(open(commands)):
    src = entry["file"]
    if not src.endswith(".cpp") or not uses.search(open(src, errors="replace").read()):
        continue
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        out.append(a)
    cmd = [out[0], "-I" + include, "-fsyntax-only"] + out[1:]
    result = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        sys.exit(f"onednn3-check: error: {src} does not compile against oneDNN 3.2")
    checked += 1
if checked == 0:
    sys.exit("onednn3-check: error: no source of the build uses oneDNN (is the build configured without it?)")
print(f"onednn3-check: {checked} sources compile against oneDNN 3.2's headers")
EOF
