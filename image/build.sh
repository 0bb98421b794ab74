#!/usr/bin/env bash
# image/build.sh: build the brc-merge training-job image from ./Dockerfile
# (`make image` runs this). Offline by design: no registry is needed.
#
#  1. engine: docker when its daemon answers (`docker info`), else podman;
#     podman (+ runc, debootstrap) is apt-installed when missing and we are root
#     (image/deps.sh).
#     podman gets image/containers.conf (runc, rlimits this VM allows) through
#     CONTAINERS_CONF and builds with --isolation=chroot.
#  2. the base image: if BASE_IMAGE is a debian:<suite>[-slim] image that is not
#     present, image/make-base.sh debootstraps it from the host's mirror.
#  3. .image-context/ (gitignored): build.sh and the patch series (only the
#     files build.sh reads, with fixed modes, so untracked files or a different
#     umask do not bust the layer cache), plus the verified CPython source (hard
#     links when possible) or, with PREBUILT=1, the host's built ft-brc.
#  4. `build` with --pull=never and the OCI label values as build arguments.
#
# Settings (environment; the Makefile passes them through):
#   IMAGE=brc-merge:3.14.7-ft-brc  BASE_IMAGE=debian:bookworm-slim  BUILDER_IMAGE=
#   OPTIMIZE=0|1 (PGO+LTO; default 1 from source, the build's own with PREBUILT=1)  PREBUILT=0|1  WITH_TK=0|1  JOBS=
#   SOURCE=tarball-or-tree (default: build.sh's lookup in its cache)  CACHE=DIR
#   ENGINE=docker|podman (default: auto)  BUILD_FLAGS="extra build flags"
# `image/build.sh --base-only` stops after step 2 (`make base-image`).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
t0=$SECONDS
say() { printf '[image %4ds] %s\n' $((SECONDS - t0)) "$*"; }
die() { printf 'image/build.sh: error: %s\n' "$@" >&2; exit 1; }
is_true() { [[ ${1:-0} =~ ^(1|yes|true|on)$ ]]; }

# shellcheck source=patches/3.14/base
. patches/3.14/base
IMAGE=${IMAGE:-brc-merge:$PY_VERSION-ft-brc}
BASE_IMAGE=${BASE_IMAGE:-debian:bookworm-slim}
BUILDER_IMAGE=${BUILDER_IMAGE:-$BASE_IMAGE}
is_true "${PREBUILT:-0}" && PREBUILT=1 || PREBUILT=0
# A from-source image is a release artifact: PGO + LTO unless OPTIMIZE=0.
is_true "${OPTIMIZE:-$((1 - PREBUILT))}" && OPTIMIZE=1 || OPTIMIZE=0
is_true "${WITH_TK:-0}" && WITH_TK=1 || WITH_TK=0
CTX=.image-context

# ------------------------------------------------------------------ 1. engine
if [[ -z ${ENGINE:-} ]]; then
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
        ENGINE=docker
    else
        ENGINE=podman
    fi
fi
if [[ $ENGINE == podman ]]; then
    # podman, runc, debootstrap: apt-installed as root, else the command is printed.
    [[ -z $(ENGINE=podman image/deps.sh --missing) ]] ||
        BRC_MERGE_SKIP_IMAGE=0 ENGINE=podman image/deps.sh >&2 ||
        die "no docker daemon, and the tools above are missing"
    export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/image/containers.conf}
    ENGINE_BUILD_FLAGS=(--isolation=chroot --pull=never --layers)
else
    ENGINE_BUILD_FLAGS=(--pull=false)
fi
say "engine: $ENGINE ($($ENGINE --version | head -n 1))"

# --------------------------------------------------------------- 2. base image
ensure_base() {
    case $1 in
        debian:*|library/debian:*|docker.io/library/debian:*)
            ENGINE=$ENGINE image/make-base.sh "$1" ;;   # a no-op when it exists
        *) $ENGINE image inspect "$1" >/dev/null 2>&1 ||
            die "base image $1 is not present and no registry is reachable; load it first (e.g. $ENGINE load -i FILE)" ;;
    esac
}
ensure_base "$BASE_IMAGE"
[[ $BUILDER_IMAGE == "$BASE_IMAGE" ]] || ensure_base "$BUILDER_IMAGE"
[[ ${1:-} != --base-only ]] || exit 0

# ---------------------------------------------------------- 3. build context
# Hard links (no copying) when the context and the source share a filesystem.
stage_tree() {  # stage_tree SRC DEST
    rm -rf -- "$2"
    mkdir -p "$(dirname "$2")"
    cp -al -- "$1" "$2" 2>/dev/null || { rm -rf -- "$2"; cp -a -- "$1" "$2"; }
}
config() { ./build.sh ${CACHE:+--cache "$CACHE"} --print-config | sed -n "s/^$1=//p"; }
trap 'rm -rf -- "$CTX"' EXIT
rm -rf -- "$CTX"
mkdir -p "$CTX/source" "$CTX/prebuilt" "$CTX/repo/patches/3.14"
install -m 0755 build.sh "$CTX/repo/build.sh"
mapfile -t series < <(sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' patches/3.14/series | grep -v '^$' || true)
for f in base series checksums "${series[@]}"; do
    install -m 0644 "patches/3.14/$f" "$CTX/repo/patches/3.14/$f"
done
SOURCE_NAME=Python-$PY_VERSION
if [[ $PREBUILT == 1 ]]; then
    # Only an install that matches the current series and source may be shipped,
    # optimised (make release) or not.
    ./build.sh ${CACHE:+--cache "$CACHE"} --offline --check ft-brc >/dev/null 2>&1 ||
        ./build.sh ${CACHE:+--cache "$CACHE"} --offline --optimize --check ft-brc >/dev/null 2>&1 ||
        die "PREBUILT=1 needs an up-to-date ft-brc build in the cache: run 'make ft-brc' (or 'make release') first"
    prefix=$(config BRC_MERGE_CACHE)/install/ft-brc
    stage_tree "$prefix" "$CTX/prebuilt"
    OPTIMIZE=$(sed -n 's/^optimize //p' "$prefix/.brc-merge-key")   # for the labels
    say "context: prebuilt $prefix"
else
    src=${SOURCE:-${BRC_MERGE_SOURCE:-}}
    if [[ -z $src ]]; then
        cache=$(config BRC_MERGE_CACHE)
        for cand in "$cache/downloads/${URL##*/}" "$cache/sources/Python-$PY_VERSION"; do
            [[ -e $cand ]] && { src=$cand; break; }
        done
    fi
    [[ -n $src && -e $src ]] || die "no CPython $PY_VERSION source (tarball or tree) found" \
        "  set SOURCE=/path/to/${URL##*/} (or an unpacked tree), or put it where build.sh looks (see README, Offline builds)"
    src=$(realpath -- "$src")
    SOURCE_NAME=${src##*/}
    if [[ -d $src ]]; then stage_tree "$src" "$CTX/source/$SOURCE_NAME"
    else ln -f -- "$src" "$CTX/source/$SOURCE_NAME" 2>/dev/null || cp -- "$src" "$CTX/source/"; fi
    say "context: source $src (build.sh verifies it in the builder)"
fi

# ----------------------------------------------------------------- 4. labels
series_sha256() {  # build.sh's series_key, from build.sh itself
    ./build.sh --print-config --line 3.14 | sed -n 's/^SERIES_KEY=//p'
}
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [[ $REVISION != unknown ]] && ! git diff --quiet HEAD -- Dockerfile .dockerignore build.sh patches image 2>/dev/null; then
    REVISION=$REVISION-dirty
fi
SOURCE_URL=$(git remote get-url origin 2>/dev/null || true)
SERIES_SHA256=$(series_sha256)

# ------------------------------------------------------------------ 5. build
args=(--build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "BUILDER_IMAGE=$BUILDER_IMAGE"
      --build-arg "PREBUILT=$PREBUILT" --build-arg "OPTIMIZE=$OPTIMIZE" --build-arg "WITH_TK=$WITH_TK"
      --build-arg "JOBS=${JOBS:-}" --build-arg "SOURCE_NAME=$SOURCE_NAME"
      --build-arg "VERSION=$PY_VERSION-ft-brc" --build-arg "REVISION=$REVISION"
      --build-arg "SOURCE_URL=$SOURCE_URL" --build-arg "SERIES_SHA256=$SERIES_SHA256")
say "building $IMAGE (PREBUILT=$PREBUILT OPTIMIZE=$OPTIMIZE WITH_TK=$WITH_TK, series $SERIES_SHA256)"
# shellcheck disable=SC2086  # BUILD_FLAGS is a list of flags
$ENGINE build "${ENGINE_BUILD_FLAGS[@]}" ${BUILD_FLAGS:-} "${args[@]}" -f Dockerfile -t "$IMAGE" .
size=$($ENGINE image inspect --format '{{.Size}}' "$IMAGE")
say "built $IMAGE: $((size / 1000000)) MB"
if [[ $ENGINE == podman ]]; then
    say "run it: CONTAINERS_CONF=$CONTAINERS_CONF podman run --rm -it $IMAGE"
else
    say "run it: docker run --rm -it $IMAGE"
fi
