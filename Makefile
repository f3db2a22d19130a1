# ibemu's entry points. `make setup` is the first command of the README: it
# installs what is missing (Debian packages), builds, starts the emulated
# fabric and runs a real verbs program across two emulated HCAs.
comma := ,
# `make test` builds and tests with ASan and UBSan unless SANITIZE says
# otherwise (SANITIZE= for a plain build, SANITIZE=thread for TSan); every
# other target builds without sanitizers. A sanitized build has its own
# directory: build-address-undefined, build-thread.
test: SANITIZE ?= address,undefined
BUILD ?= build$(if $(SANITIZE),-$(subst $(comma),-,$(SANITIZE)))
JOBS ?= $(shell nproc)
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
SOAK_PAIRS ?= 4
SOAK_QPS ?= 8
SOAK_SECONDS ?= 60
export IBEMU_RUNTIME_DIR ?= $(if $(XDG_RUNTIME_DIR),$(XDG_RUNTIME_DIR)/ibemu,$(if $(filter 0,$(shell id -u)),/run/ibemu,/tmp/ibemu-$(shell id -u)))

.PHONY: all setup deps build test unit integration demo bench clean format format-check \
	kmod kernel-test kernel-bench bench-rxe install install-dkms package package-test portability-test fuzz soak tutorials

all: build

setup: deps build demo

deps:
	@scripts/install-deps.sh

# Configured on first use; BUILD is not known when make reads the rules
# (it depends on the target's SANITIZE), so the check is in the recipe.
build:
	@[ -f $(BUILD)/CMakeCache.txt ] || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		$(if $(SANITIZE),-DIBEMU_SANITIZE=$(SANITIZE))
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

test: deps build
	@scripts/run-tests.sh $(BUILD)

unit: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

integration: build
	IBEMU_BUILD=$(abspath $(BUILD)) /usr/bin/python3 -m pytest -q tests/integration

# Every tutorial of docs/tutorials (and docs/testing-your-code.md), run as
# written (tests/tutorials/README.md).
tutorials: build
	tests/tutorials/run.sh $(BUILD)

# ibemu.ko for KVER (scripts/kernel-version.sh picks one), built in $(BUILD)/kernel.
kmod:
	@rm -rf $(BUILD)/kernel && mkdir -p $(BUILD)/kernel
	cp kernel/*.c kernel/*.h kernel/Kbuild $(BUILD)/kernel/
	$(MAKE) -C /lib/modules/$$(scripts/kernel-version.sh)/build M=$(abspath $(BUILD))/kernel modules

# Boots Debian's kernel in qemu and runs verbs programs on ibemu.ko's devices.
kernel-test: build kmod
	tests/kernel/run.sh $(BUILD)

install: build
	scripts/install.sh $(BUILD)

install-dkms: build
	scripts/install.sh $(BUILD) --dkms

# The Debian packages ibemu and ibemu-dkms (cmake/Packaging.cmake), built with
# CPack from a plain build for /usr in PACKAGE_BUILD (docs/install.md).
PACKAGE_BUILD ?= build-pkg
package:
	@[ -f $(PACKAGE_BUILD)/CMakeCache.txt ] || cmake -S . -B $(PACKAGE_BUILD) \
		-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr -DBUILD_TESTING=OFF
	cmake --build $(PACKAGE_BUILD) -j$(JOBS)
	cd $(PACKAGE_BUILD) && cpack
	@ls -1 $(PACKAGE_BUILD)/*.deb

# Installs the packages in a fresh Debian 12 chroot and runs the first
# tutorial there (root, debootstrap and the Debian archive; minutes, so not
# part of `make test`).
package-test: package
	tests/packaging/test-debs.sh $(PACKAGE_BUILD)

# For Debian 12, 13 and unstable (PORTABILITY_RELEASES), a fresh root with that
# release's compiler and rdma-core, ibemu built there from this checkout and
# real programs run on it as an ordinary user (root, debootstrap and the
# Debian archive; minutes per release, so not part of `make test`).
PORTABILITY_RELEASES ?= bookworm trixie sid
portability-test:
	tests/portability/run.sh $(PORTABILITY_RELEASES)

# Each fuzz target (tests/fuzz) for FUZZ_SECONDS, built with clang, libFuzzer,
# ASan and UBSan in FUZZ_BUILD.
fuzz: deps
	@scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# SOAK_PAIRS x 2 processes, SOAK_QPS RC QPs each, SOAK_SECONDS of checked
# traffic through faulty links (tests/soak).
soak: build
	tests/soak/run_soak.py --build $(BUILD) --pairs $(SOAK_PAIRS) --qps $(SOAK_QPS) \
		--seconds $(SOAK_SECONDS)

bench: build
	IBEMU_BUILD=$(abspath $(BUILD)) /usr/bin/python3 tests/bench/run_bench.py

# Kernel consumers' figures (IPoIB, NVMe-oF) beside Soft-RoCE, in the qemu
# guest of kernel-test (root, qemu and Debian's kernel: make deps).
kernel-bench: build kmod
	tests/kernel/qemu-run.sh --kver $$(scripts/kernel-version.sh) --timeout 900 \
		tests/bench/kernel-guest.sh $(abspath $(BUILD))

# perftest on Soft-RoCE and on ibemu.ko side by side, in one qemu boot.
bench-rxe: build kmod
	tests/kernel/qemu-run.sh --kver $$(scripts/kernel-version.sh) --timeout 900 \
		tests/bench/kernel-guest.sh $(abspath $(BUILD)) perftest

format:
	find common emulator-daemon sm-lite provider transport tests -name '*.[ch]' -o -name '*.cc' | xargs clang-format -i

# kernel/ follows the kernel's coding style (scripts/checkpatch.pl), not .clang-format.
format-check:
	find common emulator-daemon sm-lite provider transport tests -name '*.[ch]' -o -name '*.cc' | xargs clang-format --dry-run --Werror

clean:
	rm -rf $(BUILD)
