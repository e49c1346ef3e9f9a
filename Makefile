# Tessera — the two commands a newcomer needs:
#   make run    install what is needed, build, and start the studio on the example MRI
#   make test   install what is needed, build, and run the whole test suite
# Everything the project needs comes from Debian's packages, installed by `make deps`.

SHELL := /bin/bash
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
XVFB := xvfb-run -a -s "-screen 0 1280x800x24"
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Warnings are errors in CI builds.
WERROR := $(if $(CI),ON,OFF)
# ccache keys on paths relative to the checkout, so another clone on the same machine (CI's) reuses
# what an earlier build compiled; for builds with debug information (fuzzing, sanitizers) it must also
# leave the build directory's absolute path out of its key (the objects' debug information then names
# the directory of the build that first compiled them).
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

DEBIAN_PACKAGES := \
	build-essential cmake ninja-build ccache pkg-config git \
	qt6-base-dev qt6-charts-dev libqt6opengl6-dev libgl-dev \
	libvtk9-dev libopencv-dev libgdcm-dev libgdcm-tools libhdf5-dev hdf5-tools libeigen3-dev libdnnl-dev zlib1g-dev \
	nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev \
	xvfb xauth libgl1-mesa-dri fonts-dejavu-core chromium \
	insighttoolkit5-examples python3-pydicom qt6-svg-dev python3-protobuf python3-nibabel python3-h5py teem-apps \
	clang-16 libclang-rt-16-dev libomp-16-dev llvm-16 \
	libopenmpi-dev openmpi-bin

.PHONY: all deps peer-deps slurm-deps configure build run test bench peer-bench screenshots clean

all: build

# Idempotent: installs only what is missing, so a second run costs one dpkg query.
deps:
	@missing=$$(dpkg-query -W -f='$${Package} $${Status}\n' $(DEBIAN_PACKAGES) 2>/dev/null \
	            | awk '$$NF == "installed" {print $$1}' | sort > /tmp/tessera-installed.$$$$; \
	          for p in $(DEBIAN_PACKAGES); do grep -qx "$$p" /tmp/tessera-installed.$$$$ || echo $$p; done; \
	          rm -f /tmp/tessera-installed.$$$$); \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages: $$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "All Debian packages present."; fi

# The peer benchmark compares with Debian's PyTorch and torchvision (its RetinaNet; large: not needed to
# build, run or test).
PEER_PACKAGES := python3-torch python3-torchvision
peer-deps: deps
	@missing=$$(for p in $(PEER_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# Slurm (slurmctld + slurmd) for bench/mpi/slurm_local.sh, which runs a Tessera job under Slurm on this
# machine: not needed to build, run or test.
SLURM_PACKAGES := slurm-wlm
slurm-deps: deps
	@missing=$$(for p in $(SLURM_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DTESSERA_WARNINGS_AS_ERRORS=$(WERROR)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	@if [ -n "$$DISPLAY" ] || [ -n "$$WAYLAND_DISPLAY" ]; then \
	  $(BUILD_DIR)/app/tessera; \
	else \
	  echo "No display found. To see the studio without one, run it under Xvfb:"; \
	  echo '  xvfb-run -a -s "-screen 0 1280x800x24" $(BUILD_DIR)/app/tessera            # a virtual display'; \
	  echo '  xvfb-run -a -s "-screen 0 1280x800x24" $(BUILD_DIR)/app/tessera --screenshot tessera.png'; \
	  echo "Running the headless default job instead: $(BUILD_DIR)/app/tessera-cli"; \
	  $(BUILD_DIR)/app/tessera-cli; \
	fi

# GUI tests need an X server: the whole suite runs under Xvfb with Qt's xcb platform. In CI (CI set)
# every libFuzzer target first runs its 30-second smoke with a fixed seed (make fuzz-smoke: a clang build of the engine,
# about 10 minutes from nothing, then 3 minutes).
test: build
	@if [ -n "$(CI)" ]; then $(MAKE) --no-print-directory fuzz-smoke; fi
	cd $(BUILD_DIR) && QT_QPA_PLATFORM=xcb $(XVFB) ctest --output-on-failure -j $(JOBS) --timeout 900

bench: build
	@for b in $(BUILD_DIR)/bench/bm_*; do echo "== $$b"; OMP_WAIT_POLICY=PASSIVE QT_QPA_PLATFORM=xcb $(XVFB) $$b; done

peer-bench: peer-deps build
	bench/peer/run.sh $(BUILD_DIR)

screenshots: build
	resources/screenshots/regenerate.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)

# Fuzzing (tests/fuzz/, DESIGN.md §6): a libFuzzer target per input parser, built with clang-16 in
# $(FUZZ_BUILD_DIR) (the engine alone, instrumented with ASan and UBSan, at -O1 with line tables only:
# what a symbolized report needs, at about half the compile time of -O2 -g). `make fuzz` runs each target
# FUZZ_SECONDS (600), two at a time; `make fuzz-smoke` 30 s each. Both print a table and fail on any
# crash, leak or timeout (reproducers and logs: $(FUZZ_BUILD_DIR)/fuzz-out/<date-time>/).
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 600
.PHONY: fuzz fuzz-smoke fuzz-build

fuzz-build: deps
	cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
	  -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 -DTESSERA_FUZZ=ON \
	  -DTESSERA_BUILD_UI=OFF -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCH=OFF
	cmake --build $(FUZZ_BUILD_DIR) --target tessera_fuzzers -j $(JOBS)

fuzz: fuzz-build
	FUZZ_BUILD_DIR=$(abspath $(FUZZ_BUILD_DIR)) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=2 tests/fuzz/run_fuzzers.sh

fuzz-smoke: fuzz-build
	FUZZ_BUILD_DIR=$(abspath $(FUZZ_BUILD_DIR)) FUZZ_SECONDS=30 FUZZ_JOBS=2 FUZZ_SEED=1 tests/fuzz/run_fuzzers.sh

# Sanitizer builds (GCC's ASan/UBSan/TSan runtimes; Debian's Qt, VTK and oneDNN stay uninstrumented).
# `make sanitize`: everything built in $(ASAN_BUILD_DIR) with ASan + UBSan (TESSERA_SANITIZE=address),
# then the whole suite under Xvfb as `make test` runs it; leaks are errors, except the third-party ones
# listed in tests/sanitizers/lsan.supp (studio processes keep Mesa's driver loaded there, see
# tests/CMakeLists.txt, so that its memory is not reported from an unloaded library). `make tsan`: $(TSAN_BUILD_DIR) with TSan, running the core
# mesh, trainer and run tests and the studio's threaded tests (the planner, the training run, the
# equivalence view and ui/model/gui_mailbox). OpenMP's threads are invisible to TSan (libgomp is not
# instrumented), so oneDNN runs one thread there (OMP_NUM_THREADS=1): the threads checked are the core
# mesh's pool, the data prefetcher and the studio's workers. Debian's Qt is not built for TSan, so the
# studio's workers hand results over with the C++ library only (std::thread, std::mutex, GuiMailbox),
# which TSan sees; tests/sanitizers/tsan.supp (the engine's) and tsan_studio.supp (added for the studio's
# tests) name uninstrumented third-party code only. The engine
# label includes the MPI mesh tests (ranks under mpirun, each with its pool), and the studio starts MPI
# runs with mpirun (a fork of its multithreaded process, then exec), which TSan refuses by default
# (die_after_fork=0); those ranks run the TSan build's tessera-cli.
ASAN_BUILD_DIR ?= build-asan
TSAN_BUILD_DIR ?= build-tsan
SANITIZER_BUILD_TYPE ?= RelWithDebInfo
SANITIZER_SUPPRESSIONS := $(CURDIR)/tests/sanitizers
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1 \
	LSAN_OPTIONS=suppressions=$(SANITIZER_SUPPRESSIONS)/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 QTEST_FUNCTION_TIMEOUT=2700000
TSAN_COMMON := second_deadlock_stack=1:history_size=7:die_after_fork=0
TSAN_ENV := OMP_NUM_THREADS=1 QTEST_FUNCTION_TIMEOUT=2700000
TSAN_TARGETS := test_engine_mesh test_equivalence_report test_uneven_threads test_engine_trainer test_engine_run test_host_prediction \
	run_files_tool tst_gui_mailbox tst_training_studio tst_planner_panel tst_equivalence_view tessera-cli test_mpi_mesh
.PHONY: sanitize sanitize-build tsan tsan-build

sanitize-build: deps
	cmake -S . -B $(ASAN_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(SANITIZER_BUILD_TYPE) -DTESSERA_SANITIZE=address \
	  -DTESSERA_WARNINGS_AS_ERRORS=$(WERROR)
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)

sanitize: sanitize-build
	cd $(ASAN_BUILD_DIR) && $(ASAN_ENV) QT_QPA_PLATFORM=xcb $(XVFB) ctest --output-on-failure -j $(JOBS) --timeout 2700

tsan-build: deps
	cmake -S . -B $(TSAN_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(SANITIZER_BUILD_TYPE) -DTESSERA_SANITIZE=thread \
	  -DTESSERA_BUILD_BENCH=OFF -DTESSERA_WARNINGS_AS_ERRORS=$(WERROR)
	cmake --build $(TSAN_BUILD_DIR) -j $(JOBS) --target $(TSAN_TARGETS)

# Only $(TSAN_TARGETS) are built there: the gtests among them carry the label "engine", the QtTests
# are named.
tsan: tsan-build
	cat $(SANITIZER_SUPPRESSIONS)/tsan.supp $(SANITIZER_SUPPRESSIONS)/tsan_studio.supp > $(TSAN_BUILD_DIR)/tsan_with_studio.supp
	cd $(TSAN_BUILD_DIR) && $(TSAN_ENV) QT_QPA_PLATFORM=xcb $(XVFB) sh -c \
	  'TSAN_OPTIONS=suppressions=$(SANITIZER_SUPPRESSIONS)/tsan.supp:$(TSAN_COMMON) \
	     ctest --output-on-failure -j $(JOBS) --timeout 2700 -L engine; e=$$?; \
	   TSAN_OPTIONS=suppressions=$(abspath $(TSAN_BUILD_DIR))/tsan_with_studio.supp:$(TSAN_COMMON) \
	     ctest --output-on-failure -j $(JOBS) --timeout 2700 -R "^tst_(gui_mailbox|training_studio|planner_panel|equivalence_view)$$"; \
	   exit $$(( e || $$? ))'
