#!/usr/bin/env bash
# A newcomer in a box: builds a minimal Debian 12 root with debootstrap, puts a clean clone of this
# checkout's HEAD into it and runs exactly the README's set-up commands inside it (`make test`,
# then `make train`, shortened through TRAIN_ARGS), then checks `make train`'s closing JSON line.
#
#   scripts/fresh-machine-test.sh                 as root (chroot needs it); exit 0 only if all passed
#   FRESH_ROOT=DIR scripts/fresh-machine-test.sh  where to build the root (default build/fresh-root;
#                                                 it is deleted first and after a passing run)
#   FRESH_KEEP=1 ...                              keep the root afterwards, to look inside
#   FRESH_TRAIN_ARGS="..."                        TRAIN_ARGS for the shortened `make train`
#   FRESH_CCACHE=DIR|none                         compiler cache the root's build shares (default:
#                                                 this machine's ccache folder when ccache is here)
#   FRESH_CUDA_BUILD=DIR                          a build tree made here with CUDA (default: build/);
#                                                 required when this machine has nvcc
#
# Then the other newcomer: a user who builds against an install made *with* CUDA on a machine that
# has none. The CUDA build tree of this machine is installed into the root (which has no CUDA), and
# tests/install/consumer is built against it there: it must link no CUDA library (ldd) and run,
# and asking it for a CUDA device must give one DeviceError (libprecis_cuda.so cannot be loaded).
#
# Why: a green CI on a developer machine once hid a missing package for a whole wave, because that
# machine already had it. Here nothing is installed but Debian's minbase, so every package `make
# test` and `make train` need must come from scripts/install-deps.sh.
#
# The apt source is read from this machine's own apt configuration when the script runs (no mirror
# is named in the repository), and that configuration (sources, apt.conf.d) is what the new root
# uses: a newcomer's machine reaches the same archive this one does. CUDA is not in Debian, so the
# root covers the CPU-only newcomer path; the CUDA build is covered by `make test` on the CI machine.
# The clone is of the committed HEAD: uncommitted changes are not tested.
#
# The root's build shares this machine's ccache folder (bind-mounted; the root's own ccache, which
# install-deps.sh installs, uses it), so the second full build of a CI run costs minutes instead of
# ten. That cannot hide a missing package: ccache only skips a compile whose compiler, command line
# and every header it read are the same and present (a missing header turns the lookup into a real
# preprocessor run, which fails as it would without the cache); configuring, linking, every tool
# and every test run for real. Hits need equal paths: both builds give ccache their checkout as
# base_dir (.ci/run exports CCACHE_BASEDIR), and dpkg installs the same compiler with the same
# size and mtime, which is what ccache's default compiler check compares.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
root=${FRESH_ROOT:-$repo/build/fresh-root}
keep=${FRESH_KEEP:-0}
ccache_dir=${FRESH_CCACHE:-}
if [[ -z $ccache_dir ]] && command -v ccache >/dev/null 2>&1; then ccache_dir=$(ccache -k cache_dir); fi
[[ $ccache_dir == none ]] && ccache_dir=
train_args=${FRESH_TRAIN_ARGS:---epochs 1 --limit-train 4096 --limit-test 2000 --log-every 8}
suite=bookworm

say() { echo "fresh-machine: $*"; }
die() { echo "fresh-machine: FAILED: $*" >&2; exit 1; }

(( EUID == 0 )) || die "needs root (debootstrap and chroot); run it as root, e.g. with sudo"
command -v debootstrap >/dev/null 2>&1 ||
  die "debootstrap is not installed (scripts/install-deps.sh --ci installs it); the fresh-machine test did not run"
command -v git >/dev/null 2>&1 || die "git is not installed; the fresh-machine test did not run"

# ---- the apt source of this machine ------------------------------------------------------------
# One "URI SUITE COMPONENTS" line per Debian source for bookworm, bookworm-updates and
# bookworm-security, from both the one-line (*.list) and the deb822 (*.sources) formats. Disabled
# files (other suffixes) are ignored, as apt ignores them.
apt_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    awk '$1 == "deb" {
           i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }   # skip [ options ]
           uri = $i; s = $(i + 1); comps = ""
           for (j = i + 2; j <= NF && $j !~ /^#/; j++) comps = comps " " $j
           print uri, s comps }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    awk 'function flush() {
           if (types ~ /(^| )deb( |$)/ && enabled != "no")
             for (u in uris) for (s in suites) print uris[u], suites[s] comps
           types = ""; enabled = ""; comps = ""; delete uris; delete suites }
         /^[ \t]*#/ { next }
         /^[ \t]*$/ { flush(); next }
         { key = tolower($1); sub(/:$/, "", key); $1 = ""; val = substr($0, 2) }
         key == "types" { types = val }
         key == "enabled" { enabled = tolower(val) }
         key == "uris" { n = split(val, a, " "); for (k = 1; k <= n; k++) uris[k] = a[k] }
         key == "suites" { n = split(val, a, " "); for (k = 1; k <= n; k++) suites[k] = a[k] }
         key == "components" { comps = " " val }
         END { flush() }' "$f"
  done
}
mapfile -t sources < <(apt_sources | awk -v s="$suite" '$2 == s || $2 == s "-updates" || $2 == s "-security"' | sort -u)
mirror=$(printf '%s\n' "${sources[@]}" | awk -v s="$suite" '$2 == s { print $1; exit }')
[[ -n "$mirror" ]] || die "no apt source for Debian '$suite' in /etc/apt/sources.list{,.d}: cannot build a Debian 12 root"

# ---- the root: made new every run, always unmounted ----------------------------------------------
mounted=()
unmount_all() {
  local i
  for (( i = ${#mounted[@]} - 1; i >= 0; i-- )); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null || true
  done
  mounted=()
}
# Nothing may still be mounted under the root when it is deleted: `rm -rf` through a bind mount of
# /dev would delete the host's files. --one-file-system is the second guard.
remove_root() {
  [[ -d "$root" ]] || return 0
  local m
  while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(findmnt -rn -o TARGET | awk -v r="$root/" 'index($0, r) == 1' | sort -r)
  if findmnt -rn -o TARGET | awk -v r="$root/" 'index($0, r) == 1' | grep -q .; then
    die "something is still mounted under $root; not deleting it"
  fi
  rm -rf --one-file-system "$root"
}
on_exit() {
  local rc=$?
  unmount_all
  if (( rc == 0 && keep == 0 )); then remove_root; fi
  (( rc == 0 )) || echo "fresh-machine: the root is kept for inspection: $root" >&2
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

t0=$SECONDS
remove_root
mkdir -p "$(dirname "$root")"
say "debootstrap --variant=minbase $suite from this machine's apt source"
if ! debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.debootstrap.log" 2>&1; then
  tail -20 "$root.debootstrap.log" >&2
  die "debootstrap could not build a $suite root from $mirror (log: $root.debootstrap.log); the fresh-machine test did not run"
fi
rm -f "$root.debootstrap.log"
t_root=$(( SECONDS - t0 ))

# The new root gets this machine's apt configuration (sources and apt.conf.d: proxies, validity
# settings), its DNS settings, and nothing else from the host.
printf 'deb %s\n' "${sources[@]}" >"$root/etc/apt/sources.list"
rm -f "$root"/etc/apt/sources.list.d/*
if compgen -G '/etc/apt/apt.conf.d/*' >/dev/null; then cp -a /etc/apt/apt.conf.d/. "$root/etc/apt/apt.conf.d/"; fi
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
packages_before=$(chroot "$root" dpkg-query -W -f='${Package}\n' | sort)

git clone --quiet --no-hardlinks "$repo" "$root/root/precis"
say "cloned $(git -C "$root/root/precis" rev-parse --short HEAD) into the root"

# What a running machine has: /proc, a read-only /sys (CPU topology), /dev with its pts and shm.
for m in proc sys dev dev/pts dev/shm; do
  [[ "$m" == proc || "$m" == sys || -d "/$m" ]] || continue
  mkdir -p "$root/$m"
  case "$m" in
    proc) mount -t proc proc "$root/proc" ;;
    sys) mount -t sysfs -o ro sysfs "$root/sys" ;;
    *) mount --bind "/$m" "$root/$m" ;;
  esac
  mounted+=("$root/$m")
done
if [[ -n $ccache_dir ]]; then
  mkdir -p "$ccache_dir" "$root/root/.cache/ccache"
  mount --bind "$ccache_dir" "$root/root/.cache/ccache"
  mounted+=("$root/root/.cache/ccache")
  say "the root's build shares the compiler cache $ccache_dir"
fi

# Exactly the README's commands, as root in a login-like environment with nothing from the host.
in_root() {
  local cache=()
  [[ -z $ccache_dir ]] || cache=(CCACHE_BASEDIR=/root/precis "CCACHE_MAXSIZE=$(ccache -k max_size)")
  env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
      TERM=dumb "${cache[@]}" chroot "$root" /bin/bash -c "cd /root/precis && $1"
}
# A newcomer's bare machine has no make; the README says to install it with git first.
say "apt-get install make (README: before the first make)"
in_root 'apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends make >/dev/null' ||
  die "could not install make inside the root (is the apt source reachable?); the fresh-machine test did not run"

say "make test (inside the root)"
t1=$SECONDS
in_root 'make test' 2>&1 | tee "$root.make-test.log" | sed -u 's/^/  | /' ||
  die "make test failed inside the fresh root (log: $root.make-test.log)"
t_test=$(( SECONDS - t1 ))
grep -qE '^100% tests passed' "$root.make-test.log" || die "make test printed no '100% tests passed' line"

say "make train TRAIN_ARGS=\"$train_args\" (inside the root)"
t2=$SECONDS
in_root "make train TRAIN_ARGS='$train_args'" 2>&1 | tee "$root.make-train.log" | sed -u 's/^/  | /' ||
  die "make train failed inside the fresh root (log: $root.make-train.log)"
t_train=$(( SECONDS - t2 ))
json=$(grep -E '^\{.*\}$' "$root.make-train.log" | tail -1 || true)
[[ -n "$json" ]] || die "make train printed no JSON summary line"
python3 - "$json" <<'EOF' || die "the JSON summary line is not what make train promises: $json"
import json, math, sys
j = json.loads(sys.argv[1])
need = {"model": "resnet20", "precision": "bf16"}
for k, v in need.items():
    assert j.get(k) == v, f"{k} is {j.get(k)!r}, expected {v!r}"
assert j.get("epochs") == 1, f"epochs is {j.get('epochs')!r}"
acc = j.get("test_accuracy")
assert isinstance(acc, (int, float)) and math.isfinite(acc), "test_accuracy missing or not finite"
# One epoch on 4096 images is far from 92%, but far above chance (10 classes).
assert acc > 0.5, f"test_accuracy {acc} is near chance: the model did not train"
EOF

# ---- an install made with CUDA, on a machine without CUDA -----------------------------------------
cuda_build=${FRESH_CUDA_BUILD:-$repo/build}
nvcc_here=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
cuda_line="not run: this machine has no nvcc, so no install made with CUDA"
if compgen -G "$cuda_build/libprecis_cuda.so*" >/dev/null; then
  say "cmake --install $cuda_build (built with CUDA) into the root's /opt/precis-cuda"
  cmake --install "$cuda_build" --prefix "$root/opt/precis-cuda" >"$root.install.log" 2>&1 ||
    { tail -20 "$root.install.log" >&2; die "cmake --install $cuda_build failed"; }
  rm -f "$root.install.log"
  compgen -G "$root/opt/precis-cuda/lib*/libprecis_cuda.so*" >/dev/null || die "the install has no libprecis_cuda.so"
  say "a consumer of that install, inside the root (no CUDA there)"
  consumer_out=$(in_root 'set -e
    cmake -S tests/install/consumer -B /tmp/consumer-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH=/opt/precis-cuda -DPRECIS_CONSUMER_MODE=package >/tmp/consumer-cuda.log 2>&1 ||
      { cat /tmp/consumer-cuda.log; exit 1; }
    cmake --build /tmp/consumer-cuda --target consumer >>/tmp/consumer-cuda.log 2>&1 || { cat /tmp/consumer-cuda.log; exit 1; }
    if ldd /tmp/consumer-cuda/consumer | grep -E "libcuda|libcublas|libcudnn|libnccl|libprecis_cuda"; then
      echo "LINKS-CUDA"; exit 1
    fi
    /tmp/consumer-cuda/consumer
    /tmp/consumer-cuda/consumer --cuda') || die "the consumer of the CUDA install failed in the root: $consumer_out"
  echo "$consumer_out" | sed 's/^/  | /'
  grep -q 'dtype_name(DType::bf16) = bf16' <<<"$consumer_out" || die "the consumer of the CUDA install did not run"
  grep -q 'cuda: DeviceError: cuda:0 is not available: the CUDA backend .* could not be loaded' <<<"$consumer_out" ||
    die "asking the consumer for a CUDA device did not give the backend's load error: $consumer_out"
  cuda_line="linked no CUDA library, ran, and said: $(grep '^cuda:' <<<"$consumer_out")"
elif [[ -n $nvcc_here ]]; then
  die "this machine has nvcc ($nvcc_here) but $cuda_build holds no libprecis_cuda.so: build it first (make build) or set FRESH_CUDA_BUILD"
fi

packages_after=$(chroot "$root" dpkg-query -W -f='${Package}\n' | sort)
asked=$(grep -h '^install-deps: installing:' "$root.make-test.log" "$root.make-train.log" | sed 's/^install-deps: installing: //' | tr '\n' ' ')
rm -f "$root.make-test.log" "$root.make-train.log"

echo
echo "fresh-machine summary (Debian $suite minbase root; CPU only: CUDA is not in Debian, so the"
echo "CUDA build itself is not covered here)"
echo "  root built by debootstrap:  ${t_root} s"
echo "  packages install-deps asked for: ${asked:-none}"
echo "  packages in the root: $(wc -l <<<"$packages_before") before, $(wc -l <<<"$packages_after") after"
echo "  make test (deps, build, all tests): ${t_test} s (compiler cache: ${ccache_dir:-none})"
echo "  make train TRAIN_ARGS=\"$train_args\": ${t_train} s"
echo "  JSON: $json"
echo "  a program built against this machine's CUDA install, in the root: $cuda_line"
echo "fresh-machine: PASSED in $(( SECONDS - t0 )) s"
