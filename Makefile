# Convenience front end over CMake + Ninja. Everything is incremental: re-running a target
# rebuilds only what changed (Ninja re-runs CMake itself when a CMakeLists.txt or glob changes).
#
#   make test     install missing Debian packages, configure, build, run ctest
#   make build    configure and build (library, tests, benchmarks)
#   make bench    build precis-bench
#   make deps     install missing Debian packages only
#   make clean    remove the build directory
#   make train    (arrives with the Models issue)
#
# Variables: BUILD_DIR (build), BUILD_TYPE (Release), PRECIS_CUDA (AUTO|ON|OFF), JOBS (nproc),
# CMAKE_ARGS (extra -D options, applied on the next configure), CTEST_ARGS (e.g. -L install).

SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c

BUILD_DIR   ?= build
BUILD_TYPE  ?= Release
PRECIS_CUDA ?= AUTO
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS  ?=
CTEST_ARGS  ?=

# The CUDA backend is built whenever nvcc is found (PRECIS_CUDA=AUTO); CUDA installs usually
# leave /usr/local/cuda/bin off PATH.
ifneq ($(wildcard /usr/local/cuda/bin/nvcc),)
export PATH := /usr/local/cuda/bin:$(PATH)
endif

CONFIGURE = cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
            -DPRECIS_CUDA=$(PRECIS_CUDA) $(CMAKE_ARGS)

.PHONY: all deps configure build test bench clean train

all: build

deps:
	@scripts/install-deps.sh

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

train:
	@echo "make train arrives with the Models issue"; exit 1
