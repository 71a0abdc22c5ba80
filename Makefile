# Thin wrapper over CMake. `make run` and `make test` install what is missing (apt-get,
# through scripts/setup.sh), configure, build, then run the demo or the whole suite.
BUILD       ?= build
BUILD_TYPE  ?= Release
CMAKE_FLAGS ?=
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_FLAGS ?= --output-on-failure -j$(JOBS)

.PHONY: all setup configure build run test asan bench format clean fuzz

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

run: build
	./$(BUILD)/llmsys demo

test: build
	cd $(BUILD) && ctest $(CTEST_FLAGS)

# The suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own build tree.
asan:
	$(MAKE) test BUILD=build-asan BUILD_TYPE=Debug CMAKE_FLAGS="-DLLMSYS_SANITIZE=ON $(CMAKE_FLAGS)"

# libFuzzer targets (fuzz/, clang + ASan + UBSan, own build tree), each run FUZZ_SECONDS
# from its seed corpus fuzz/corpus/<target>; FUZZ_ONLY=REGEX picks some. Crashes land in
# build-fuzz/fuzz-crashes/<target>/. Prints SKIP when clang is not installed.
FUZZ_SECONDS ?= 60
FUZZ_ONLY    ?= .
fuzz:
	@if ! command -v clang >/dev/null 2>&1; then echo "SKIP fuzz: clang not found (apt-get install clang)"; exit 0; fi; \
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DLLMSYS_FUZZ=ON >/dev/null && \
	cmake --build build-fuzz -j$(JOBS) --target fuzzers && \
	bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS) '$(FUZZ_ONLY)'

# Every benchmark in bench/; each prints a table and writes bench-out/<name>.json.
bench: build
	@mkdir -p bench-out
	@for b in $(BUILD)/bench_*; do echo "== $$b"; $$b --out bench-out/$$(basename $$b).json || exit 1; done

# The suite again with OpenBLAS forced to other CPUs' kernels (OPENBLAS_CORETYPE; slow, not part
# of CI): the same sums in another order, as on another machine. A test that asserts an outcome
# within a learned model's noise fails here first. Only kernels this CPU can run are listed.
OPENBLAS_CORES ?= $(shell grep -qw avx512_bf16 /proc/cpuinfo && echo Cooperlake) \
                  $(shell grep -w avx512f /proc/cpuinfo | grep -w avx512bw | grep -qw avx512vl && echo SkylakeX) \
                  $(shell grep -qw avx2 /proc/cpuinfo && echo Haswell) \
                  $(shell grep -qw avx /proc/cpuinfo && echo Sandybridge) Prescott
.PHONY: test-kernels
test-kernels: build
	@for c in $(OPENBLAS_CORES); do echo "== OPENBLAS_CORETYPE=$$c"; \
	  (cd $(BUILD) && OPENBLAS_CORETYPE=$$c ctest $(CTEST_FLAGS)) || exit 1; done

# Mutation testing (slow, not part of CI): each one-line mutant of tests/mutants.txt applied to a
# scratch copy under /tmp, rebuilt, and run against its ctest cases; prints kill rate and survivors.
# MUTATE_FLAGS="--only REGEX" runs some of them. Report in docs/notes/mutation.md.
.PHONY: mutate
mutate: build
	python3 scripts/mutate.py --build $(BUILD) --jobs $(JOBS) $(MUTATE_FLAGS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-fuzz bench-out demo-out
