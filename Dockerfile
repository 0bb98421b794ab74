# brc-merge training-job image: the patched free-threaded CPython (ft-brc) in
# /usr/local on a slim Debian. Build it with `make image` (image/build.sh), which
# stages the offline CPython source (or, PREBUILT=1, the host's dist/ft-brc)
# into .image-context/ and passes the labels' values; see README "Container image".
#
# Build arguments:
#   BASE_IMAGE     runtime base (default debian:bookworm-slim)
#   BUILDER_IMAGE  builder base (default: BASE_IMAGE, so library versions match)
#   OPTIMIZE       1 = PGO + LTO (build.sh --optimize): on for release images,
#                  off by default (it triples the compile time)
#   PREBUILT       0 = compile with build.sh from .image-context/source/ (default);
#                  1 = take the already built install from .image-context/prebuilt/
#                  (the host's dist/ft-brc; quick, for tests) and relocate it
#   WITH_TK        1 = keep tkinter/idlelib (+ Tcl/Tk/X11 libraries); default 0
#   JOBS           make -j (default: the builder's nproc)
#   VERSION REVISION SOURCE_URL SERIES_SHA256   OCI label values (image/build.sh)

ARG BASE_IMAGE=debian:bookworm-slim
ARG BUILDER_IMAGE=${BASE_IMAGE}
ARG PREBUILT=0

# ---------------------------------------------------------------- builder base
FROM ${BUILDER_IMAGE} AS builder-base
ARG DEBIAN_FRONTEND=noninteractive
# build.sh's BUILD_DEPS (tests/test_image.py keeps the lists in sync; build.sh's
# deps stage would still install anything missing). binutils for slim-prefix.sh
# comes with build-essential.
# DL3008 (pin versions): the pin is the Debian release of BUILDER_IMAGE; exact
# versions would break the build whenever a point or security update replaces
# them on the mirror, and the runtime stage gets the same release's libraries.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        build-essential pkg-config libssl-dev zlib1g-dev libbz2-dev \
        libreadline-dev libsqlite3-dev libffi-dev liblzma-dev libgdbm-dev tk-dev \
        uuid-dev libncurses-dev libzstd-dev rsync curl patch \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/brc-merge

# ---------------------------------------------- PREBUILT=0: compile with build.sh
FROM builder-base AS build-0
ARG OPTIMIZE=0
ARG JOBS=
ARG SOURCE_NAME=Python-3.14.7
# build.sh + patches/3.14 (base, series, checksums, the listed patches)
COPY .image-context/repo/ ./
COPY .image-context/source/ /opt/cpython-source/
# --prefix /usr/local: configure, sysconfig and script shebangs all say
# /usr/local, so the runtime stage copies the tree unchanged. build.sh refuses a
# non-empty foreign prefix; the base's /usr/local only holds empty dirs.
RUN find /usr/local -mindepth 1 -delete \
    && BRC_MERGE_CACHE=/opt/brc-merge-cache BRC_MERGE_DIST=/opt/brc-merge/dist \
       BRC_MERGE_OPTIMIZE="${OPTIMIZE}" BRC_MERGE_JOBS="${JOBS}" \
       ./build.sh --offline --source "/opt/cpython-source/${SOURCE_NAME}" --prefix /usr/local ft-brc \
    && rm -rf /opt/brc-merge-cache /opt/cpython-source

# --------------------------------- PREBUILT=1: the host's build, relocated here
FROM builder-base AS build-1
COPY .image-context/prebuilt/ /usr/local/
COPY image/relocate.sh image/
RUN image/relocate.sh /usr/local

# ----------------------------------------------------------------- trim + libs
# DL3006 (tag the image): build-0/build-1 are this file's own stages, not images.
# hadolint ignore=DL3006
FROM build-${PREBUILT} AS build
ARG WITH_TK=0
COPY image/slim-prefix.sh /opt/brc-merge/image/
RUN WITH_TK="${WITH_TK}" /opt/brc-merge/image/slim-prefix.sh /usr/local

# -------------------------------------------------------------------- runtime
FROM ${BASE_IMAGE} AS runtime
ARG DEBIAN_FRONTEND=noninteractive
ENV LANG=C.UTF-8
COPY --from=build /usr/local/ /usr/local/
# Exactly the packages owning the libraries the interpreter and its extension
# modules link against (computed by slim-prefix.sh with ldd + dpkg in the
# builder, which has the same Debian release).
RUN apt-get update \
    && xargs -a /usr/local/share/brc-merge/runtime-packages \
        apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log

ARG VERSION=3.14.7-ft-brc
ARG REVISION=unknown
ARG SOURCE_URL=
ARG SERIES_SHA256=unknown
ARG BASE_IMAGE
ARG PREBUILT
ARG OPTIMIZE=0
LABEL org.opencontainers.image.title="brc-merge python" \
      org.opencontainers.image.description="Free-threaded CPython 3.14 (ft-brc) that frees memory held by biased-refcount queues of blocked threads" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      io.brc-merge.patch-series.sha256="${SERIES_SHA256}" \
      io.brc-merge.prebuilt="${PREBUILT}" \
      io.brc-merge.pgo="${OPTIMIZE}" \
      io.brc-merge.lto="${OPTIMIZE}"

# Smoke check: free-threaded with the BRC patches, runtime libraries present, pip runs.
RUN python3 -c 'import sys; assert sys._is_gil_enabled() is False, "GIL is on"; \
assert hasattr(sys, "_brc_stats"), "not an ft-brc build"; \
import ssl, sqlite3, zlib, bz2, lzma, ctypes, readline, curses, dbm.gnu, uuid, venv, compression.zstd; \
print(sys.version)' \
    && python3.14t -c 'import sys; print(sys._brc_stats())' \
    && python3 -m pip --version \
    && pip --version
CMD ["python3"]
