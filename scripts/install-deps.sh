#!/usr/bin/env bash
# Installs the Debian packages precis needs, and only those that are missing.
#
#   scripts/install-deps.sh            build and test dependencies
#   scripts/install-deps.sh --data     the same, plus the training data used by `make train`
#   scripts/install-deps.sh --ci       the same, plus what CI's extra checks need (debootstrap for
#                                      scripts/fresh-machine-test.sh)
#   scripts/install-deps.sh --check    list what is missing; install nothing (exit 1 if any)
#
# Quiet when everything is present; `apt-get update` runs only when something must be installed.
# Runs apt through sudo when not root. Non-interactive (CI has no stdin).
# CUDA is not installed here: the CUDA backend is built whenever nvcc is found (PRECIS_CUDA=AUTO).
set -euo pipefail

# Build and test: compiler, CMake + Ninja, ccache, Eigen, Catch2 v2, oneDNN, CLI11 (precis-train,
# precis-bench), pkg-config, zlib (readers of compressed data), python3 (fixture generators),
# protobuf + ISA-L (TensorBoard event files: Event messages, CRC-32C), doxygen (`make docs`).
build_packages=(build-essential g++ cmake ninja-build ccache libeigen3-dev catch2 libdnnl-dev ocl-icd-opencl-dev
                libcli11-dev pkg-config zlib1g-dev python3 libprotobuf-dev protobuf-compiler libisal-dev doxygen)
# Data-parallel training on the CPU (dist/, PRECIS_MPI=AUTO builds it when MPI is found): Open MPI.
build_packages+=(libopenmpi-dev openmpi-bin)
# Training data for `make train`: required, and optional (reported, never fatal, when absent).
data_packages=(dataset-fashion-mnist)
optional_data_packages=(wordnet-base)
# CI only: the fresh-machine test builds a Debian root with debootstrap; scripts/onednn3-check.sh
# fetches oneDNN 3.x's headers with pip.
ci_packages=(debootstrap python3-pip)

want_data=0
want_ci=0
check_only=0
for arg in "$@"; do
  case "$arg" in
    --data) want_data=1 ;;
    --ci) want_ci=1 ;;
    --check) check_only=1 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

say() { echo "install-deps: $*"; }
die() { echo "install-deps: error: $*" >&2; exit 1; }

installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}
# The candidate version apt would install, or nothing when the package is unknown to apt.
candidate() {
  apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { if ($2 != "(none)") print $2 }'
}

required=("${build_packages[@]}")
optional=()
if (( want_data )); then
  required+=("${data_packages[@]}")
  optional+=("${optional_data_packages[@]}")
fi
(( want_ci )) && required+=("${ci_packages[@]}")

if ! command -v dpkg-query >/dev/null 2>&1; then
  die "dpkg-query not found: this script supports Debian/Ubuntu (apt) only. Install by hand: ${required[*]} ${optional[*]}"
fi

missing=()
for p in "${required[@]}"; do installed "$p" || missing+=("$p"); done
missing_optional=()
for p in "${optional[@]}"; do installed "$p" || missing_optional+=("$p"); done

if (( ${#missing[@]} == 0 && ${#missing_optional[@]} == 0 )); then
  exit 0  # all present: stay quiet
fi

if (( check_only )); then
  (( ${#missing[@]} )) && say "missing: ${missing[*]}"
  (( ${#missing_optional[@]} )) && say "missing (optional): ${missing_optional[*]}"
  exit $(( ${#missing[@]} > 0 ))
fi

if ! command -v apt-get >/dev/null 2>&1; then
  die "apt-get is not available; install these packages by hand: ${missing[*]} ${missing_optional[*]}"
fi

# An optional package that the package lists already on this machine do not know is reported and
# skipped up front, so that its absence does not cost an `apt-get update` on every run.
have_lists=0
compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null && have_lists=1
if (( have_lists )); then
  kept=()
  for p in "${missing_optional[@]}"; do
    if [[ -n "$(candidate "$p")" ]]; then kept+=("$p"); else
      say "optional package '$p' is not available from apt here; skipping it"
    fi
  done
  missing_optional=("${kept[@]}")
  (( ${#missing[@]} + ${#missing_optional[@]} )) || exit 0
fi

# Root runs apt directly; anyone else goes through sudo (non-interactively when there is no
# terminal, so CI fails with a message instead of hanging on a password prompt).
sudo_cmd=()
if (( EUID != 0 )); then
  command -v sudo >/dev/null 2>&1 ||
    die "not root and sudo is not installed; as root run: apt-get install ${missing[*]} ${missing_optional[*]}"
  if [[ -t 0 ]]; then sudo_cmd=(sudo); else sudo_cmd=(sudo -n); fi
fi
apt_env=(env DEBIAN_FRONTEND=noninteractive)
apt_opts=(-y -qq --no-install-recommends -o Dpkg::Use-Pty=0)

say "missing: ${missing[*]} ${missing_optional[*]}"
say "running apt-get update"
"${sudo_cmd[@]}" "${apt_env[@]}" apt-get -qq update || die "apt-get update failed"

to_install=("${missing[@]}")
for p in "${missing_optional[@]}"; do
  if [[ -n "$(candidate "$p")" ]]; then
    to_install+=("$p")
  else
    say "optional package '$p' is not available from apt here; skipping it"
  fi
done
unknown=()
for p in "${missing[@]}"; do [[ -n "$(candidate "$p")" ]] || unknown+=("$p"); done
if (( ${#unknown[@]} )); then
  die "apt has no candidate for: ${unknown[*]} (check /etc/apt/sources.list; Debian 12 'main' has them)"
fi
(( ${#to_install[@]} )) || exit 0

say "installing: ${to_install[*]}"
"${sudo_cmd[@]}" "${apt_env[@]}" apt-get install "${apt_opts[@]}" "${to_install[@]}" >/dev/null ||
  die "apt-get install failed for: ${to_install[*]}"

still=()
for p in "${to_install[@]}"; do installed "$p" || still+=("$p"); done
(( ${#still[@]} == 0 )) || die "still not installed after apt-get: ${still[*]}"
say "done"
