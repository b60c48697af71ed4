# A thin wrapper over CMake. `make demo` and `make check` install what is
# missing (Debian 12, as root), configure, build and run.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all deps build check demo asan static fuzz format format-check bench clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	@cmake -S . -B $(BUILD) -DCMAKE_RULE_MESSAGES=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null

build: deps $(BUILD)/CMakeCache.txt
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory -s

check: build
	@bash scripts/check.sh $(BUILD)

demo: build
	@bash scripts/demo.sh $(BUILD)

# The test suite under AddressSanitizer and UndefinedBehaviorSanitizer.
asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSANITIZE=ON -DCMAKE_RULE_MESSAGES=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS) -- --no-print-directory -s
	@bash scripts/check.sh build-asan

# A fully static sandboxd for container images: build-static/sandboxd.
static: deps
	@cmake -S . -B build-static -DCMAKE_BUILD_TYPE=Release -DSANDBOXD_STATIC=ON -DBUILD_TESTING=OFF >/dev/null
	@cmake --build build-static -j $(JOBS) --target sandboxd -- --no-print-directory -s

fuzz: deps
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DFUZZ=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS) -- --no-print-directory -s

format:
	@git ls-files '*.c' '*.h' | xargs clang-format -i

format-check:
	@git ls-files '*.c' '*.h' | xargs clang-format --dry-run -Werror

bench: build
	@bash scripts/bench.sh $(BUILD)

clean:
	@rm -rf $(BUILD) build-asan build-static build-fuzz
