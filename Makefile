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

DEBIAN_PACKAGES := \
	build-essential cmake ninja-build ccache pkg-config git \
	qt6-base-dev qt6-charts-dev libqt6opengl6-dev libgl-dev \
	libvtk9-dev libopencv-dev libeigen3-dev libdnnl-dev zlib1g-dev \
	nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev \
	xvfb xauth libgl1-mesa-dri fonts-dejavu-core \
	insighttoolkit5-examples python3-pydicom qt6-svg-dev python3-protobuf

.PHONY: all deps peer-deps configure build run test bench peer-bench screenshots clean

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

# The peer benchmark compares with Debian's PyTorch (large; not needed to build, run or test).
peer-deps: deps
	@dpkg-query -W -f='$${Status}\n' python3-torch 2>/dev/null | grep -q "install ok installed" || \
	  { $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch; }

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

# GUI tests need an X server: the whole suite runs under Xvfb with Qt's xcb platform.
test: build
	cd $(BUILD_DIR) && QT_QPA_PLATFORM=xcb $(XVFB) ctest --output-on-failure -j $(JOBS) --timeout 900

bench: build
	@for b in $(BUILD_DIR)/bench/bm_*; do echo "== $$b"; OMP_WAIT_POLICY=PASSIVE QT_QPA_PLATFORM=xcb $(XVFB) $$b; done

peer-bench: peer-deps build
	bench/peer/run.sh $(BUILD_DIR)

screenshots: build
	resources/screenshots/regenerate.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
