# gpumux — the commands a user runs. See README.md.
#   make demo   install build deps if missing, build, run the FGD study on the embedded trace
#               and the JCT simulation of training jobs sharing GPUs
#   make test   install build deps if missing, build with warnings as errors, run all tests
#   make bench  build and run the benchmarks (prints figures)
#   make asan   build with AddressSanitizer + UBSan in build-asan/ and run the tests there
BUILD ?= build
BUILD_TYPE ?= Release
WERROR ?= ON
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
# demo builds only the binary; test and bench add the tests and benchmarks.
TESTS ?= OFF
BENCH ?= OFF

.PHONY: all setup configure build demo test bench asan clean format

all: build

setup:
	@sh scripts/setup.sh --quiet

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DGPUMUX_WERROR=$(WERROR) \
	  -DGPUMUX_BUILD_TESTS=$(TESTS) -DGPUMUX_BUILD_BENCH=$(BENCH) $(CMAKE_FLAGS) >/dev/null

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
	sh bench/sweep.sh ./$(BUILD)/gpumux
	./$(BUILD)/bench/gpumux_extender_bench --iterations 1000
	./$(BUILD)/bench/gpumux_device_plugin_bench --iterations 1000
	./$(BUILD)/bench/gpumux_extender_soak --nodes 1000 --cycles 6000 --report-every 500

asan:
	$(MAKE) test BUILD=build-asan BUILD_TYPE=Debug CMAKE_FLAGS=-DGPUMUX_SANITIZE=ON

clean:
	rm -rf build build-asan gpumux-report

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')
