# brc-merge: build and test the patched free-threaded CPython.
# All the real work is in build.sh; this file is the short-hand for it.
#
# Pass-through variables (empty = build.sh's own default / environment):
#   JOBS=N  SOURCE=PATH  CACHE=DIR  DIST=DIR  PATCHES=DIR  PREFIX=DIR  OPTIMIZE=1  OFFLINE=1  QUIET=1
#   HOST_PYTHON=python3 (creates .venv for the tests)  PYTEST_ARGS=...
#   BENCH_ARGS=... (extra bench/run.py options, e.g. --groups M1,M2)  BENCH_TORCH=1

SHELL := /bin/bash
.DEFAULT_GOAL := ft-brc

FLAVOURS := gil ft ft-brc
BUILD := ./build.sh
HOST_PYTHON ?= python3
VENV := .venv
PYTEST_ARGS ?=
BENCH_ARGS ?=

BUILD_ARGS := $(if $(JOBS),--jobs '$(JOBS)') $(if $(SOURCE),--source '$(SOURCE)') \
	$(if $(CACHE),--cache '$(CACHE)') $(if $(DIST),--dist '$(DIST)') \
	$(if $(PATCHES),--patches '$(PATCHES)') $(if $(PREFIX),--prefix '$(PREFIX)') \
	$(if $(filter 1 yes true,$(OPTIMIZE)),--optimize) \
	$(if $(filter 1 yes true,$(OFFLINE)),--offline) $(if $(filter 1 yes true,$(QUIET)),--quiet)

.PHONY: help ft-brc ft gil flavours test venv bench bench-fast bench-venv clean distclean checksums \
	image base-image
# Later: stress, tsan (add them to .PHONY and `help`).

help: ## this list (default target: ft-brc)
	@echo "make [TARGET] [JOBS=N SOURCE=PATH CACHE=DIR DIST=DIR PATCHES=DIR OPTIMIZE=1 OFFLINE=1]"
	@echo "  (default target: ft-brc)"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)/  \1\t\2/' | expand -t 14

ft-brc: ## build free-threaded + patch series into dist/ft-brc (the default)
	$(BUILD) $(BUILD_ARGS) ft-brc

ft: ## build stock free-threaded CPython into dist/ft
	$(BUILD) $(BUILD_ARGS) ft

gil: ## build stock (GIL) CPython into dist/gil
	$(BUILD) $(BUILD_ARGS) gil

flavours: ## build all three flavours: gil ft ft-brc
	$(BUILD) $(BUILD_ARGS) $(FLAVOURS)

checksums: ## recompute patches/<line>/checksums after changing the series
	$(BUILD) $(BUILD_ARGS) --update-checksums

# The host python3 makes the venv; if it cannot (e.g. Debian without
# python3-venv), our own stock build dist/gil does.
venv: ## create/refresh .venv (host python3 + tests/requirements.txt)
	@if [[ ! -x $(VENV)/bin/pytest || tests/requirements.txt -nt $(VENV)/.requirements-stamp ]]; then \
		set -e; \
		py=$(HOST_PYTHON); \
		if ! $$py -m venv --clear $(VENV); then \
			py=$$($(BUILD) $(BUILD_ARGS) --print-config | sed -n 's/^BRC_MERGE_DIST=//p')/gil/bin/python3; \
			echo "$(HOST_PYTHON) cannot create a venv; using $$py"; \
			$$py -m venv --clear $(VENV); \
		fi; \
		echo "created $(VENV) with $$($(VENV)/bin/python -VV)"; \
		$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt; \
		touch $(VENV)/.requirements-stamp; \
	fi

test: flavours venv ## build all flavours, then run pytest tests/
	$(if $(DIST),BRC_MERGE_DIST='$(DIST)') $(VENV)/bin/pytest tests/ $(PYTEST_ARGS)

# bench/requirements.txt (pyperf, matplotlib, pyperformance) on top of .venv.
bench-venv: venv
	@if [[ bench/requirements.txt -nt $(VENV)/.bench-requirements-stamp ]]; then \
		set -e; \
		$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r bench/requirements.txt; \
		touch $(VENV)/.bench-requirements-stamp; \
	fi

bench: flavours bench-venv ## full benchmarks (~11 min) -> bench/results/<timestamp>/report.md
	$(if $(DIST),BRC_MERGE_DIST='$(DIST)') $(VENV)/bin/python bench/run.py --mode full $(BENCH_ARGS)

bench-fast: flavours bench-venv ## quick benchmarks (<= 3 min, CI) -> bench/results/fast/report.md
	$(if $(DIST),BRC_MERGE_DIST='$(DIST)') $(VENV)/bin/python bench/run.py --mode fast $(BENCH_ARGS)

# The container image (Dockerfile; image/build.sh does the work, README "Container image").
IMAGE_ENV := OPTIMIZE='$(OPTIMIZE)' JOBS='$(JOBS)' SOURCE='$(SOURCE)' CACHE='$(CACHE)' \
	IMAGE='$(IMAGE)' BASE_IMAGE='$(BASE_IMAGE)' BUILDER_IMAGE='$(BUILDER_IMAGE)' \
	PREBUILT='$(PREBUILT)' WITH_TK='$(WITH_TK)' ENGINE='$(ENGINE)' BUILD_FLAGS='$(BUILD_FLAGS)'

image: $(if $(filter 1 yes true,$(PREBUILT)),ft-brc) ## build the ft-brc image with docker or podman [OPTIMIZE=1 PREBUILT=1 IMAGE= BASE_IMAGE=]
	$(IMAGE_ENV) image/build.sh

base-image: ## create BASE_IMAGE (debian:bookworm-slim) locally with debootstrap
	$(IMAGE_ENV) image/build.sh --base-only

clean: ## remove the dist/ symlinks and .venv (keeps every cache)
	@dist=$$($(BUILD) $(BUILD_ARGS) --print-config | sed -n 's/^BRC_MERGE_DIST=//p'); \
	for f in $(FLAVOURS); do \
		if [[ -L $$dist/$$f ]]; then echo "rm $$dist/$$f"; rm -f "$$dist/$$f"; fi; \
	done; \
	rmdir "$$dist" 2>/dev/null || true
	rm -rf $(VENV)

distclean: clean ## also remove CACHE/build and CACHE/install (keeps CACHE/sources and downloads)
	@cache=$$($(BUILD) $(BUILD_ARGS) --print-config | sed -n 's/^BRC_MERGE_CACHE=//p'); \
	[[ -n $$cache && $$cache != / ]] || { echo "refusing: cache is '$$cache'"; exit 1; }; \
	echo "rm -rf $$cache/build $$cache/install $$cache/tmp"; \
	rm -rf "$$cache/build" "$$cache/install" "$$cache/tmp"
