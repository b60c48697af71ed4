# A thin wrapper over CMake. `make demo` and `make check` install what is
# missing (Debian 12, as root), configure, build and run.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
PREFIX ?= /usr/local
DESTDIR ?=

# Configures BUILD; $(1) is ON in developer builds (warnings are errors) and
# OFF in users' (make build, make demo, make install).
configure = cmake -S . -B $(BUILD) -DCMAKE_RULE_MESSAGES=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSBX_WERROR=$(1) $(CMAKE_FLAGS) >/dev/null
compile = cmake --build $(1) -j $(JOBS) $(2) -- --no-print-directory -s

.PHONY: all deps build check demo install asan static fuzz format \
	format-check bench sdk-diff clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@$(call configure,OFF)
	@$(call compile,$(BUILD))

check: deps
	@$(call configure,ON)
	@$(call compile,$(BUILD))
	@bash scripts/check.sh $(BUILD)

# Only the two programs the examples run.
demo: deps
	@$(call configure,OFF)
	@$(call compile,$(BUILD),--target sbx sandboxd)
	@bash scripts/demo.sh $(BUILD)

# sbx, sandboxd and the docs under DESTDIR/PREFIX; the static sandboxd of
# `make static` too when it was built (as sandboxd-static, beside sbx, where
# the docker backend looks for the binary it injects into containers).
install: deps
	@$(call configure,OFF)
	@$(call compile,$(BUILD),--target sbx sandboxd)
	@DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)" \
	  --component sbx >/dev/null
	@if [ -x build-static/sandboxd ]; then \
	  install -D -m 0755 build-static/sandboxd \
	    "$(DESTDIR)$(PREFIX)/bin/sandboxd-static"; fi

# The test suite under AddressSanitizer and UndefinedBehaviorSanitizer.
asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSANITIZE=ON \
	  -DSBX_WERROR=ON -DCMAKE_RULE_MESSAGES=OFF >/dev/null
	@$(call compile,build-asan)
	@bash scripts/check.sh build-asan

# A fully static sandboxd for container images: build-static/sandboxd.
static: deps
	@cmake -S . -B build-static -DCMAKE_BUILD_TYPE=Release -DSANDBOXD_STATIC=ON \
	  -DBUILD_TESTING=OFF >/dev/null
	@$(call compile,build-static,--target sandboxd)

fuzz: deps
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DFUZZ=ON >/dev/null
	@$(call compile,build-fuzz)

format:
	@git ls-files '*.c' '*.h' | xargs clang-format -i

format-check:
	@git ls-files '*.c' '*.h' | xargs clang-format --dry-run -Werror

bench: build
	@bash scripts/bench.sh $(BUILD)

# The requests of sbx run against the real Agents SDK's (node and npm).
sdk-diff: build
	@bash scripts/sdk-diff.sh $(BUILD)

clean:
	@rm -rf $(BUILD) build-asan build-static build-fuzz build-release-gcc \
	  build-release-clang
