# The two commands of the README, and a few more. Every target that builds
# first installs what is missing (deploy/install-deps.sh, Debian packages only).
BUILD      ?= build
BUILD_SAN  ?= build-san
BUILD_TSAN ?= build-tsan
MODE       ?= sync
JOBS       ?= $(shell nproc)
DEMO_ARGS  ?=
GRID       ?= deploy/experiment.grid
EXPERIMENT ?= runs/experiment
BENCH_ARGS ?=
BENCH_TRAIN_ARGS ?=

.PHONY: all deps build build-san build-tsan demo test bench experiment clean format install install-files uninstall

all: build

deps:
	@bash deploy/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The programs (bin/), libshardps (lib/, include/shardps.h, the pkg-config
# file) under PREFIX, and the Python package in the site-packages where
# PYTHON finds it for PREFIX (/usr/local/lib/python3.X/dist-packages for
# Debian's); ldconfig when run as root; a manifest in
# PREFIX/share/shardps/ that uninstall removes everything by. DESTDIR
# stages it for packaging. install-files is the step after the build (the
# tests run it on their own build folder). See deploy/install.sh.
PREFIX ?= /usr/local
PYTHON ?= /usr/bin/python3
DESTDIR ?=
install: build
	@$(MAKE) --no-print-directory install-files
install-files:
	@DESTDIR="$(DESTDIR)" bash deploy/install.sh install $(BUILD) $(PREFIX) $(PYTHON)
uninstall:
	@DESTDIR="$(DESTDIR)" bash deploy/install.sh uninstall $(PREFIX)

build-san: deps
	@cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Debug -DPS_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_SAN) -j $(JOBS)

# The default job: 2 servers + 2 workers train an MLP on Fashion-MNIST.
demo: build
	@$(BUILD)/shardps-cluster --mode $(MODE) $(DEMO_ARGS)

# The grid in GRID, each combination a local cluster; a report with a table
# and plots in EXPERIMENT/summary.md (see docs/experiments.md).
experiment: build
	@$(BUILD)/shardps-experiment --grid $(GRID) --out $(EXPERIMENT)

# Every test, built with AddressSanitizer and UndefinedBehaviorSanitizer.
test: build-san build-tsan
	@cd $(BUILD_SAN) && ctest --output-on-failure -j $(JOBS)
	@echo "ThreadSanitizer: the threaded parts (metrics endpoint, optimizer updates on the pool)"
	@cd $(BUILD_TSAN) && TSAN_OPTIONS="halt_on_error=1 exitcode=66 suppressions=$(CURDIR)/tests/tsan.supp" \
		ctest --output-on-failure -R '$(TSAN_TESTS)'

# Two places run threads beside the loop: the metrics endpoint's HTTP thread
# and the optimizer updates on the thread pool. These process-level tests
# drive both in every mode, with checkpoints (Criterion cannot start under
# TSan).
TSAN_TESTS ?= ^(it_metrics|it_async_cluster|it_sync_equivalence|it_checkpoint)$$
build-tsan: deps
	@cmake -S . -B $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=Debug -DPS_TSAN=ON -DPS_CUDA=OFF >/dev/null
	@cmake --build $(BUILD_TSAN) -j $(JOBS)

# The benchmarks on the Release build: optimizer apply against plain loops,
# push+pull against raw loopback TCP, then a sync training step split into
# compute, communication and waiting against each alone, and the layer
# library's CNN forward + backward per sample (about two minutes on a quiet
# machine). Not part of `make test`: they report numbers, they do
# not pass or fail. Options go through BENCH_ARGS to bench-pushpull, e.g.
# BENCH_ARGS="--sizes 4K,4M", and through BENCH_TRAIN_ARGS to bench-train,
# e.g. BENCH_TRAIN_ARGS="--models wide --steps 40".
bench: build
	@$(BUILD)/tests/bench/bench-apply
	@echo
	@$(BUILD)/tests/bench/bench-pushpull $(BENCH_ARGS)
	@echo
	@$(BUILD)/tests/bench/bench-train $(BENCH_TRAIN_ARGS)
	@echo
	@$(BUILD)/tests/bench/bench-layers

# The compose cluster for real (deploy/compose-check.sh): builds the image,
# runs deploy/docker-compose.yml in sync and async, kills a worker and
# restarts a server mid-run, and reports PASS/FAIL per scenario. Needs root;
# starts its own Docker engine in a network namespace and removes it after.
# Not part of `make test`: about 5 minutes with the images cached, 10 from
# scratch. COMPOSE_CHECK_ARGS takes its options, e.g.
# COMPOSE_CHECK_ARGS="--only sync,async". See docs/deploy.md.
COMPOSE_CHECK_ARGS ?=
.PHONY: compose-check
compose-check:
	@bash deploy/compose-check.sh $(COMPOSE_CHECK_ARGS)

# libFuzzer (clang, ASan + UBSan) on the frame decoder, on a real server's
# handshake, on the worker's client, and on the readers of tensor tables,
# checkpoint files and model files, FUZZ_SECONDS per target: six targets,
# three minutes in all by default. Its own build folder, since every object
# there is instrumented; `make test` only replays the last three's corpora
# (fuzz_replay_*). Results are recorded in docs/reliability.md.
BUILD_FUZZ   ?= build-fuzz
FUZZ_SECONDS ?= 30
.PHONY: fuzz fuzz-clean
fuzz: deps
	@cmake -S . -B $(BUILD_FUZZ) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DPS_FUZZ=ON -DPS_TESTS=OFF -DPS_CUDA=OFF >/dev/null
	@cmake --build $(BUILD_FUZZ) -j $(JOBS) --target fuzz_frame fuzz_handshake fuzz_client \
	    fuzz_table fuzz_checkpoint fuzz_model fuzz_rows
	@bash tests/fuzz/run.sh $(BUILD_FUZZ) $(FUZZ_SECONDS)

# The CPU half of the GPU check (deploy/gpu-check.sh --no-gpu) inside a bare
# Debian 12 root with only a compiler, CMake and ninja besides the carried
# .deb/ packages: proves the script and its package list need nothing else.
# Needs root and Debian's registry; not part of `make test` (docs/gpu.md).
GPU_CHROOT ?= /var/tmp/shardps-bookworm
.PHONY: gpu-check-chroot
gpu-check-chroot: deps
	@bash deploy/gpu-check-chroot.sh $(GPU_CHROOT)

clean: fuzz-clean
fuzz-clean:
	rm -rf $(BUILD_FUZZ)

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_TSAN)
