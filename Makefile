# gpumux — the commands a user runs. See README.md.
#   make demo   install build deps if missing, build, run the FGD study on the embedded trace
#               and the JCT simulation of training jobs sharing GPUs
#   make test   install build deps if missing, build with warnings as errors, run all tests
#   make bench  build and run the benchmarks (prints figures)
#   make asan   build with AddressSanitizer + UBSan in build-asan/ and run the tests there
#   make fuzz   build the libFuzzer targets with clang in build-fuzz/ and run each for
#               FUZZ_SECONDS (60) seconds; fails on any finding (fuzz/README.md)
#   make e2e    build, then install gpumux (kubectl apply -k deploy/overlays/monitoring) onto a
#               real single-node Kubernetes (../shared/k8s-rig, when built on this machine) and
#               run the end-to-end scenarios
#   make clean  remove every build folder and everything make demo and the README's try-it
#               commands write (gpumux-report/, gpumux-report-dl/, gpumux-try/), and
#               gpumux-report-cluster/ (what `gpumux report --from-cluster` writes by default)
BUILD ?= build
BUILD_TYPE ?= Release
WERROR ?= ON
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
# ccache (when installed) keeps rebuilds of an unchanged tree cheap; paths are made relative to
# the checkout so that two clones share the cache.
CCACHE := $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
export CCACHE_BASEDIR := $(CURDIR)
CMAKE_LAUNCHER := -DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE)
endif
# demo builds only the binary; test and bench add the tests and benchmarks.
TESTS ?= OFF
BENCH ?= OFF

.PHONY: all setup configure build demo test bench asan fuzz e2e clean format

all: build

setup:
	@sh scripts/setup.sh --quiet

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DGPUMUX_WERROR=$(WERROR) \
	  -DGPUMUX_BUILD_TESTS=$(TESTS) -DGPUMUX_BUILD_BENCH=$(BENCH) $(CMAKE_LAUNCHER) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/gpumux simulate --out gpumux-report
	./$(BUILD)/gpumux simulate --workload dl --out gpumux-report-dl

test:
	@$(MAKE) --no-print-directory build TESTS=ON
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench:
	@$(MAKE) --no-print-directory build BENCH=ON
	./$(BUILD)/bench/gpumux_bench
	./$(BUILD)/bench/gpumux_coordinator_bench
	/usr/bin/python3 bench/sdk_overhead.py --gpumux ./$(BUILD)/gpumux
	sh bench/sweep.sh ./$(BUILD)/gpumux
	./$(BUILD)/bench/gpumux_extender_bench --iterations 1000
	./$(BUILD)/bench/gpumux_device_plugin_bench --iterations 1000
	./$(BUILD)/bench/gpumux_store_bench --iterations 1000
	./$(BUILD)/bench/gpumux_extender_soak --nodes 1000 --cycles 6000 --report-every 500
	./$(BUILD)/bench/gpumux_extender_flood --duration 6 --report-every 1 --gpumux ./$(BUILD)/gpumux

asan:
	$(MAKE) test BUILD=build-asan BUILD_TYPE=Debug CMAKE_FLAGS=-DGPUMUX_SANITIZE=ON

FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: setup
	@CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DGPUMUX_FUZZ=ON -DGPUMUX_WERROR=OFF -DGPUMUX_BUILD_TESTS=OFF -DGPUMUX_BUILD_BENCH=OFF \
	  $(CMAKE_LAUNCHER) >/dev/null
	@cmake --build build-fuzz -j $(JOBS)
	sh fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Skips (exit 0, saying so) when the rig is not built here; tests/e2e/README.md.
e2e: build
	bash tests/e2e/run.sh ./$(BUILD)/gpumux

clean:
	rm -rf build build-asan build-fuzz gpumux-report gpumux-report-dl gpumux-report-cluster gpumux-try

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')
