# Convenience front end over CMake + Ninja. Everything is incremental: re-running a target
# rebuilds only what changed (Ninja re-runs CMake itself when a CMakeLists.txt or glob changes).
#
#   make test     install missing Debian packages, configure, build, run ctest
#   make build    configure and build (library, tests, benchmarks)
#   make bench    build precis-bench
#   make deps     install missing Debian packages only
#   make clean    remove the build directory
#   make docs     the API reference of the public headers (Doxygen, warnings are errors) in
#                 BUILD_DIR/docs/html/index.html (docs/api/run_doxygen.py)
#   make fuzz     build the libFuzzer harnesses (clang, sanitizers) in build-fuzz and run each for
#                 FUZZ_SECONDS (300) after replaying fuzz/regressions (scripts/fuzz.sh, fuzz/README.md)
#   make train    install missing packages (with the Fashion-MNIST data), build precis-train, train a
#                 CIFAR-style ResNet-20 on Fashion-MNIST in bf16 (docs/training.md)
#
# Variables: BUILD_DIR (build), BUILD_TYPE (Release), PRECIS_CUDA (AUTO|ON|OFF), JOBS (nproc),
# CMAKE_ARGS (extra -D options, applied on the next configure), CTEST_ARGS (e.g. -L install),
# TRAIN_ARGS (extra precis-train options for make train, e.g. TRAIN_ARGS="--threads 2 --epochs 5").

SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c

BUILD_DIR   ?= build
BUILD_TYPE  ?= Release
PRECIS_CUDA ?= AUTO
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS  ?=
CTEST_ARGS  ?=
TRAIN_ARGS  ?=

# The CUDA backend is built whenever nvcc is found (PRECIS_CUDA=AUTO); CUDA installs usually
# leave /usr/local/cuda/bin off PATH.
ifneq ($(wildcard /usr/local/cuda/bin/nvcc),)
export PATH := /usr/local/cuda/bin:$(PATH)
endif

CONFIGURE = cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
            -DPRECIS_CUDA=$(PRECIS_CUDA) $(CMAKE_ARGS)

.PHONY: all deps deps-data configure build test bench clean train fuzz docs

all: build

deps:
	@scripts/install-deps.sh

deps-data:
	@scripts/install-deps.sh --data

# Configure once; afterwards Ninja keeps the build files current. `make configure` forces a
# re-run (e.g. with new CMAKE_ARGS).
$(BUILD_DIR)/build.ninja:
	$(CONFIGURE)

configure:
	$(CONFIGURE)

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) $(CTEST_ARGS)

bench: deps $(BUILD_DIR)/build.ninja
	@if ! cmake --build $(BUILD_DIR) --target help | grep -q '^precis-bench:'; then \
	  echo "make bench: there is no precis-bench target yet (benchmarks/ has not arrived)"; exit 1; fi
	cmake --build $(BUILD_DIR) -j $(JOBS) --target precis-bench

clean:
	rm -rf $(BUILD_DIR)

docs: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) --target docs

# Fuzzing for FUZZ_SECONDS per harness (CI runs each for 20 s through scripts/sanitize-test.sh; see
# fuzz/README.md); crash inputs end up under build-fuzz/fuzz-runs.
FUZZ_SECONDS ?= 300
fuzz: deps
	JOBS=$(JOBS) scripts/fuzz.sh $(FUZZ_SECONDS)

# ResNet-20 on Fashion-MNIST with bf16 autocast: 4 epochs of batch 128, SGD (Nesterov momentum 0.9,
# weight decay 5e-4) with a OneCycle schedule peaking at lr 0.1, random crop (pad 2) + flip.
# Reaches ~92% test accuracy in ~3.5 minutes of training (docs/training.md). One intra-op
# thread plus one data-loader thread: safe on a 2-vCPU machine shared with other work, where a second
# intra-op thread makes steps several times slower (every OpenMP barrier waits on a descheduled
# thread); on an idle machine TRAIN_ARGS="--threads 2" is ~1.8x faster. The last line is the run's
# JSON summary.
train: deps-data $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS) --target precis-train
	$(BUILD_DIR)/models/tools/precis-train resnet --model resnet20 --precision bf16 --epochs 4 --batch 128 \
	  --optimizer sgd --lr 0.1 --schedule onecycle --threads 1 --workers 1 $(TRAIN_ARGS)
