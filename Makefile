# gpumux — the commands a user runs. See README.md.
#   make demo   install build deps if missing, build, run the FGD study on the embedded trace
#               and the JCT simulation of training jobs sharing GPUs
#   make test   install build deps if missing, build with warnings as errors, run all tests
#   make bench  build and run the benchmarks (prints figures)
#   make asan   build with clang, AddressSanitizer + UBSan in build-asan/ and run the tests there
#   make fuzz   build the libFuzzer targets in the same build-asan/ (one sanitizer build serves
#               both) and run each for FUZZ_SECONDS (60) seconds; fails on any finding
#               (fuzz/README.md)
#   make image  build, then write the gpumux image, runtime only, as an OCI archive without Docker
#               (scripts/make-image.sh: the binary, the libraries ldd lists, busybox) to
#               IMAGE_OUT (build/gpumux-image.tar), named IMAGE (docker.io/library/gpumux:latest);
#               push it with skopeo or import it with ctr (deploy/README.md, section 1)
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

.PHONY: all setup configure build demo test bench scale san-build asan fuzz image e2e clean format

all: build

SETUP_ARGS ?=
setup:
	@sh scripts/setup.sh --quiet $(SETUP_ARGS)

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DGPUMUX_WERROR=$(WERROR) \
	  -DGPUMUX_BUILD_TESTS=$(TESTS) -DGPUMUX_BUILD_BENCH=$(BENCH) $(CMAKE_LAUNCHER) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The demo installs only what building gpumux needs (scripts/setup.sh --demo), not the test tools.
demo:
	@$(MAKE) --no-print-directory build SETUP_ARGS=--demo
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

# One sanitizer build for the tests and the fuzz targets: clang with ASan, UBSan and libFuzzer's
# coverage instrumentation on every library (CMakeLists.txt, GPUMUX_FUZZ). `make fuzz` alone builds
# no tests there; after `make asan` it keeps them and rebuilds nothing. Line tables only, with the
# checkout's path mapped to `.`, so that ccache shares the objects between clones.
SAN_BUILD ?= build-asan
SAN_TESTS ?= $(if $(wildcard $(SAN_BUILD)/CMakeCache.txt),,-DGPUMUX_BUILD_TESTS=OFF)
san-build: setup
	@grep -qs 'CMAKE_CXX_COMPILER:.*clang' $(SAN_BUILD)/CMakeCache.txt || rm -rf $(SAN_BUILD)/CMakeCache.txt $(SAN_BUILD)/CMakeFiles
	@CC=clang CXX=clang++ cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O1 -gline-tables-only -fdebug-prefix-map=$(CURDIR)=.' \
	  -DGPUMUX_FUZZ=ON -DGPUMUX_WERROR=OFF -DGPUMUX_BUILD_BENCH=OFF $(SAN_TESTS) \
	  $(CMAKE_LAUNCHER) >/dev/null
	@cmake --build $(SAN_BUILD) -j $(JOBS)

# Under the sanitizers every test runs but three that `make test` has just run on the same
# sources: the help's examples (about 250 s there) and the simulator page's commands (about
# 130 s), whole simulations whose code the unit tests also run under the sanitizers, and
# clang-format. Left out for CI's time, which reached 2376 s once make e2e ran on the CI machine.
ASAN_SKIP ?= ^(cli\.HelpExamples|readme\.docs/SIMULATOR\.md|repo\.ClangFormat)$$
asan:
	@$(MAKE) --no-print-directory san-build SAN_TESTS=-DGPUMUX_BUILD_TESTS=ON
	cd $(SAN_BUILD) && ctest --output-on-failure -j $(JOBS) -E '$(ASAN_SKIP)'

FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: san-build
	sh fuzz/run.sh $(SAN_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The scale rig (bench/scale/README.md): a real kube-apiserver and kube-scheduler from the k8s
# rig with 500, 1,000 and 5,000 API-only GPU nodes, gpumux against the default scheduler (~30 min
# on 2 cores; SCALE_ARGS="--nodes 50 ..." for less). Skips (saying so) without the rig.
SCALE_ARGS ?=
scale:
	@$(MAKE) --no-print-directory build BENCH=ON
	/usr/bin/python3 bench/scale/run.py --gpumux ./$(BUILD)/gpumux \
	  --scale-tool ./$(BUILD)/bench/scale/gpumux_scale --out ./$(BUILD)/scale $(SCALE_ARGS)

# The image tests/e2e/run.sh installs too; deploy/README.md, section 1.
IMAGE ?= docker.io/library/gpumux:latest
IMAGE_OUT ?= $(BUILD)/gpumux-image.tar
image: build
	IMAGE=$(IMAGE) sh scripts/make-image.sh ./$(BUILD)/gpumux $(IMAGE_OUT)

# Skips (exit 0, saying so) when the rig is not built here; tests/e2e/README.md.
e2e: build
	bash tests/e2e/run.sh ./$(BUILD)/gpumux

clean:
	rm -rf build build-asan build-fuzz gpumux-report gpumux-report-dl gpumux-report-cluster gpumux-try

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')
