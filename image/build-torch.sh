#!/usr/bin/env bash
# image/build-torch.sh: the training image with torch (`make image-torch`),
# built FROM the ft-brc image that `make image` makes, from image/Dockerfile.torch.
# `image/build-torch.sh --check` (`make image-torch-check`) runs
# image/torch-check.py inside it; `--torchrun-check` (`make torchrun-check`)
# runs bench/workloads/ddp_train.py under torchrun on one node and on two "nodes"
# (containers on the host network) and checks it with image/torchrun-verify.py.
#
#  1. engine: as image/build.sh (docker if its daemon answers, else podman with
#     image/containers.conf and --isolation=chroot).
#  2. wheels for the image's interpreter (CPython 3.14, free-threaded ABI
#     cp314t, manylinux for the image's glibc and machine) into
#     .image-context/wheels (hard links when possible):
#       WHEELHOUSE=DIR  take DIR's wheels (nothing is downloaded);
#       otherwise       `$PIP download` on this host, so your pip settings apply
#                       (index-url, extra-index-url, find-links, certificates,
#                       proxy; pip.conf or PIP_* variables). The download is kept
#                       in $CACHE/wheels/<abi>, so a rebuild downloads nothing.
#     No index address is written anywhere: the image's pip runs --no-index.
#  3. build with the wheels bind-mounted (they are in no layer), --pull=never.
#
# Settings (environment; the Makefile passes them through):
#   IMAGE=brc-merge:3.14.7-ft-brc (the base)  TORCH_IMAGE=$IMAGE-torch
#   TORCH_SPEC=torch==2.14.1 (numpy is always added)  WHEELHOUSE=DIR
#   PIP="python3 -m pip" (default: dist/ft-brc's pip when built, else python3's)
#   CACHE=DIR (build.sh's cache)  ENGINE=docker|podman  BUILD_FLAGS="..."
#   SHM_SIZE=2g (--check: the container's /dev/shm; DataLoader workers put
#   every batch there, and engines default to 64 MB)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
t0=$SECONDS
say() { printf '[image-torch %4ds] %s\n' $((SECONDS - t0)) "$*"; }
die() { printf 'image/build-torch.sh: error: %s\n' "$@" >&2; exit 1; }

# shellcheck source=patches/3.14/base
. patches/3.14/base
IMAGE=${IMAGE:-brc-merge:$PY_VERSION-ft-brc}
TORCH_IMAGE=${TORCH_IMAGE:-$IMAGE-torch}
TORCH_SPEC=${TORCH_SPEC:-torch==2.14.1}
PACKAGES="$TORCH_SPEC numpy"
SHM_SIZE=${SHM_SIZE:-2g}
CTX=.image-context

if [[ -z ${ENGINE:-} ]]; then
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then ENGINE=docker; else ENGINE=podman; fi
fi
if [[ $ENGINE == podman ]]; then
    command -v podman >/dev/null || die "podman is missing: make image-deps"
    export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/image/containers.conf}
    ENGINE_BUILD_FLAGS=(--isolation=chroot --pull=never --layers)
else
    ENGINE_BUILD_FLAGS=(--pull=false)
fi

# ----------------------------------------------------------------- --check
if [[ ${1:-} == --check ]]; then
    $ENGINE image inspect "$TORCH_IMAGE" >/dev/null 2>&1 ||
        die "no image $TORCH_IMAGE: run 'make image-torch' first"
    say "running image/torch-check.py in $TORCH_IMAGE (--shm-size=$SHM_SIZE)"
    exec $ENGINE run --rm --shm-size="$SHM_SIZE" \
        -v "$ROOT/bench:/opt/brc-merge/bench:ro" \
        -v "$ROOT/image/torch-check.py:/opt/brc-merge/torch-check.py:ro" \
        "$TORCH_IMAGE" python3 /opt/brc-merge/torch-check.py
fi
# ------------------------------------------------------- --torchrun-check
# bench/workloads/ddp_train.py under torchrun: 2 ranks on one node, then 2 "nodes" of
# 2 ranks each (two containers on the host network, c10d rendezvous on
# loopback); image/torchrun-verify.py checks what the ranks wrote.
if [[ ${1:-} == --torchrun-check ]]; then
    $ENGINE image inspect "$TORCH_IMAGE" >/dev/null 2>&1 ||
        die "no image $TORCH_IMAGE: run 'make image-torch' first"
    out=$(mktemp -d "${TMPDIR:-/tmp}/brc-torchrun.XXXXXX")
    # every container this check may start, removed whatever is left of them
    names=(brc-torchrun-1 brc-torchrun-node0 brc-torchrun-node1)
    cleanup() {
        $ENGINE rm -f "${names[@]}" >/dev/null 2>&1 || true
        rm -rf -- "$out"
    }
    trap cleanup EXIT
    job=(python3 -m torch.distributed.run --nproc-per-node 2)
    train=(/opt/brc-merge/bench/workloads/ddp_train.py --epochs 3 --batches 8 --idle 2
           --height 240 --width 400)
    # --network host: the second "node" reaches the rendezvous on 127.0.0.1.
    # The two "nodes" share a host name, so they need distinct process ids
    # (--pid host): c10d tells nodes apart by host name and pid, and two
    # launchers that are both pid 1 count as one node, and never rendezvous.
    # 127.0.0.1 is both launchers' own address: is_host says which hosts the store.
    run() { # NAME OUTDIR [--pid host] ARGS...
        local name=$1 dir=$2 pid=()
        shift 2
        [[ ${1:-} != --pid ]] || { pid=(--pid "$2"); shift 2; }
        # a hung job must not hang make: the cleanup removes what is left
        timeout 600 $ENGINE run --rm --name "$name" --network host "${pid[@]}" --shm-size="$SHM_SIZE" \
            -v "$ROOT/bench:/opt/brc-merge/bench:ro" -v "$out:/out" \
            "$TORCH_IMAGE" "${job[@]}" "$@" "${train[@]}" --out "/out/$dir"
    }
    say "one node: torchrun --standalone, 2 ranks (--shm-size=$SHM_SIZE)"
    run brc-torchrun-1 one --standalone || die "the one-node job failed or hung (600 s)"
    python3 image/torchrun-verify.py "$out/one" 2 --label one-node
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    say "two nodes: two containers on the host network, 2 ranks each, rendezvous c10d at 127.0.0.1:$port"
    pids=()
    for node in 0 1; do
        run "brc-torchrun-node$node" two --pid host --nnodes 2 --node-rank "$node" \
            --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
            --rdzv-id brc-torchrun-check --rdzv-conf "is_host=$((node == 0))" &
        pids+=($!)
    done
    fail=
    for pid in "${pids[@]}"; do
        wait "$pid" || fail=1
    done
    [[ -z $fail ]] || die "a launcher of the two-node job failed or hung (600 s)"
    python3 image/torchrun-verify.py "$out/two" 4 --label two-nodes
    say "torchrun-check: ok (one node, two nodes)"
    exit 0
fi
[[ $# == 0 ]] || die "usage: image/build-torch.sh [--check|--torchrun-check]"

$ENGINE image inspect "$IMAGE" >/dev/null 2>&1 ||
    die "no image $IMAGE: run 'make image' (or 'make image PREBUILT=1') first"

# --------------------------------------------------------------- 2. wheels
# What the image's interpreter accepts: version, ABI, glibc, machine.
read -r pyver abi glibc machine < <($ENGINE run --rm "$IMAGE" python3 -c '
import os, platform, sys, sysconfig
abi = "cp%d%d%s" % (sys.version_info[0], sys.version_info[1],
                    "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "")
print("%d.%d" % sys.version_info[:2], abi,
      os.confstr("CS_GNU_LIBC_VERSION").split()[1].replace(".", "_"),
      platform.machine())')
[[ -n ${machine:-} ]] || die "could not ask $IMAGE for its python's tags"
say "base $IMAGE: python $pyver, ABI $abi, glibc ${glibc//_/.}, $machine"

trap 'rm -rf -- "$CTX"' EXIT
rm -rf -- "$CTX"
mkdir -p "$CTX"
if [[ -n ${WHEELHOUSE:-} ]]; then
    [[ -d $WHEELHOUSE ]] || die "WHEELHOUSE=$WHEELHOUSE is not a directory"
    src=$WHEELHOUSE
    say "wheels: $WHEELHOUSE (nothing is downloaded)"
else
    cache=${CACHE:-$(./build.sh --print-config | sed -n 's/^BRC_MERGE_CACHE=//p')}
    src=$cache/wheels/$abi-$machine
    mkdir -p "$src"
    if [[ -z ${PIP:-} ]]; then
        if [[ -x dist/ft-brc/bin/python3 ]]; then PIP="dist/ft-brc/bin/python3 -m pip"; else PIP="python3 -m pip"; fi
    fi
    say "wheels: $PIP download $PACKAGES for cp${pyver/./}/$abi/manylinux_${glibc}_$machine into $src (your pip settings apply; about 3 GB the first time)"
    # pip does not widen an explicit --platform: list every manylinux tag
    # the image's glibc accepts (2_5 .. its own, and the legacy aliases).
    platforms=()
    for ((minor = ${glibc#2_}; minor >= 5; minor--)); do platforms+=(--platform "manylinux_2_${minor}_$machine"); done
    for legacy in manylinux2014 manylinux2010 manylinux1; do platforms+=(--platform "${legacy}_$machine"); done
    # shellcheck disable=SC2086  # PIP and PACKAGES are word lists
    $PIP download --disable-pip-version-check --progress-bar off -q \
        --only-binary=:all: --dest "$src" \
        --python-version "$pyver" --implementation cp --abi "$abi" \
        "${platforms[@]}" $PACKAGES ||
        die "pip download failed; point your pip at an index that has $TORCH_SPEC for $abi, or set WHEELHOUSE=DIR"
fi
mkdir -p "$CTX/wheels"
cp -al -- "$src"/*.whl "$CTX/wheels/" 2>/dev/null || cp -- "$src"/*.whl "$CTX/wheels/" ||
    die "no wheels in $src"
say "staged $(ls "$CTX/wheels" | wc -l) wheels, $(du -sh "$CTX/wheels" | cut -f1)"

# ---------------------------------------------------------------- 3. build
say "building $TORCH_IMAGE FROM $IMAGE (pip install --no-index $PACKAGES)"
# shellcheck disable=SC2086  # BUILD_FLAGS is a list of flags
$ENGINE build "${ENGINE_BUILD_FLAGS[@]}" ${BUILD_FLAGS:-} \
    --build-arg "BASE_IMAGE=$IMAGE" --build-arg "PACKAGES=$PACKAGES" \
    -f image/Dockerfile.torch -t "$TORCH_IMAGE" .
size=$($ENGINE image inspect --format '{{.Size}}' "$TORCH_IMAGE")
base=$($ENGINE image inspect --format '{{.Size}}' "$IMAGE")
say "built $TORCH_IMAGE: $((size / 1000000)) MB ($(((size - base) / 1000000)) MB on top of $IMAGE)"
say "check it: make image-torch-check; run a job: $ENGINE run --rm --shm-size=$SHM_SIZE -v \$PWD:/job $TORCH_IMAGE python3 /job/train.py"
