#!/usr/bin/env bash
# build.sh - build the brc-merge CPython flavours (stock GIL, stock free-threaded,
# free-threaded + our biased-refcounting patch series) from one verified source.
# Run `./build.sh --help` for usage.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
START=$SECONDS

# The release line this script builds; everything version-specific is keyed on
# PY_VERSION from $PATCHES/base (sourced below).
SERIES_LINE=3.14

# ---------------------------------------------------------------------------
# Flavours: the ONE place that defines them and their configure flags.
# ---------------------------------------------------------------------------
VALID_FLAVOURS=(gil ft ft-brc ft-brc-debug ft-tsan ft-brc-tsan)
declare -A FLAVOUR_DESC=(
    [gil]="stock CPython, GIL enabled"
    [ft]="stock CPython, free-threaded (--disable-gil)"
    [ft-brc]="free-threaded + patch series (BRC merge)"
    [ft-brc-debug]="ft-brc with --with-pydebug (assertions, refleak runs)"
    [ft-tsan]="stock free-threaded, ThreadSanitizer + pydebug (clang)"
    [ft-brc-tsan]="ft-brc, ThreadSanitizer + pydebug (clang)"
)
declare -A FLAVOUR_PATCHED=([gil]=0 [ft]=0 [ft-brc]=1 [ft-brc-debug]=1 [ft-tsan]=0 [ft-brc-tsan]=1)
declare -A FLAVOUR_GIL=([gil]=True [ft]=False [ft-brc]=False [ft-brc-debug]=False
    [ft-tsan]=False [ft-brc-tsan]=False)   # sys._is_gil_enabled()
# Checking builds: no PGO/LTO even with --optimize (PGO under TSan would take an
# hour and tells nothing; the debug build must stay -Og to be debuggable).
declare -A FLAVOUR_CHECKING=([ft-brc-debug]=1 [ft-tsan]=1 [ft-brc-tsan]=1)
CONFIGURE_FLAGS_COMMON=(--with-ensurepip=install)
# shellcheck disable=SC2034  # read via nameref in configure_flags
CONFIGURE_FLAGS_gil=()
# shellcheck disable=SC2034
CONFIGURE_FLAGS_ft=(--disable-gil)
# shellcheck disable=SC2034
CONFIGURE_FLAGS_ft_brc=(--disable-gil)
# shellcheck disable=SC2034
CONFIGURE_FLAGS_ft_brc_debug=(--disable-gil --with-pydebug)
# TSan as CPython's own CI builds it: clang, --with-pydebug. gcc's TSan does
# not model the atomic fences CPython and mimalloc use and reports more noise.
TSAN_CC=clang-16
TSAN_CXX=clang++-16
# llvm-16 ships /usr/lib/llvm-16/bin/llvm-symbolizer: the TSan runtime needs
# its own LLVM's symbolizer (Debian's default is LLVM 14's), or reports have no
# function names and suppressions (which match names) match nothing.
TSAN_DEPS=(clang-16 libclang-rt-16-dev llvm-16)
# shellcheck disable=SC2034
CONFIGURE_FLAGS_ft_tsan=(--disable-gil --with-thread-sanitizer --with-pydebug
    "CC=$TSAN_CC" "CXX=$TSAN_CXX")
# shellcheck disable=SC2034
CONFIGURE_FLAGS_ft_brc_tsan=("${CONFIGURE_FLAGS_ft_tsan[@]}")
declare -A FLAVOUR_CC=([ft-tsan]=$TSAN_CC [ft-brc-tsan]=$TSAN_CC)
declare -A FLAVOUR_DEPS=([ft-tsan]="${TSAN_DEPS[*]}" [ft-brc-tsan]="${TSAN_DEPS[*]}")
CONFIGURE_FLAGS_OPTIMIZE=(--enable-optimizations --with-lto)
# Keep frame pointers: we profile these builds.
CONFIGURE_CFLAGS="-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer"

# Debian packages needed to build CPython with all the modules we smoke-test.
BUILD_DEPS=(build-essential pkg-config libssl-dev zlib1g-dev libbz2-dev
    libreadline-dev libsqlite3-dev libffi-dev liblzma-dev libgdbm-dev tk-dev
    uuid-dev libncurses-dev libzstd-dev rsync curl patch)

# Smoke test: these imports must work; the optional ones only warn.
SMOKE_IMPORTS=(ssl sqlite3 zlib ctypes venv)
SMOKE_OPTIONAL_IMPORTS=(bz2 lzma readline curses dbm.gnu uuid tkinter compression.zstd)

KEY_SCHEME=1   # bump to force rebuilds when the meaning of the key changes

# ---------------------------------------------------------------------------
usage() {
    cat <<EOF
Usage: ./build.sh [OPTIONS] FLAVOUR...
       ./build.sh [OPTIONS] --update-checksums
       ./build.sh [OPTIONS] --check FLAVOUR...

Builds CPython (version pinned in patches/$SERIES_LINE/base) and installs each
FLAVOUR into \$CACHE/install/FLAVOUR, with DIST/FLAVOUR a symlink to it.

Flavours:
$(for f in "${VALID_FLAVOURS[@]}"; do printf '  %-13s %s\n' "$f" "${FLAVOUR_DESC[$f]}"; done)

Options (each has an environment equivalent; the flag wins):
  --source PATH     BRC_MERGE_SOURCE   CPython tarball (.tgz/.tar.xz) or unpacked tree
  --cache DIR       BRC_MERGE_CACHE    default \${XDG_CACHE_HOME:-\$HOME/.cache}/brc-merge
  --dist DIR        BRC_MERGE_DIST     default <repo>/dist
  --prefix DIR      BRC_MERGE_PREFIX   install prefix (one FLAVOUR only); default \$CACHE/install/FLAVOUR
  --jobs N          BRC_MERGE_JOBS     default: nproc
  --patches DIR     BRC_MERGE_PATCHES  default <repo>/patches/$SERIES_LINE (base, series, checksums)
  --offline         BRC_MERGE_OFFLINE=1   never download the source
  --optimize        BRC_MERGE_OPTIMIZE=1  --enable-optimizations --with-lto (slow)
  --no-deps         BRC_MERGE_NO_DEPS=1   skip the Debian build-dependency check/install
  --quiet           BRC_MERGE_QUIET=1     only print errors and one line per flavour
  --update-checksums  recompute PATCHES/checksums from the files the series touches
  --check           exit 0 if every FLAVOUR is up to date, 3 if any needs a build
  --print-config    print the resolved settings and exit
  -h, --help        this help

Source lookup order: --source/BRC_MERGE_SOURCE; \$CACHE/downloads/Python-<ver>.tgz;
\$CACHE/sources/Python-<ver>/; download (unless offline). Tarballs must match the
pinned sha256; trees must have the pinned version and match PATCHES/checksums.
Logs: \$CACHE/build/<flavour>/logs/<stage>.log (source: \$CACHE/build/logs/source.log).
EOF
}

# ---------------------------------------------------------------------------
# Output helpers
# ---------------------------------------------------------------------------
QUIET=${BRC_MERGE_QUIET:-0}
CURRENT_STAGE=""      # "name flavour" while a stage runs
CURRENT_LOG=""
CURRENT_ERRFILE=""
TMP_PATHS=()          # removed on exit
ACTIVATE_RESTORE=()   # (old new): an install renamed aside, to restore if we die mid-swap

elapsed() { printf '[%4ds]' $((SECONDS - START)); }
say() { [[ $QUIET == 1 ]] || printf '%s %s\n' "$(elapsed)" "$*"; }
die() {  # die EXIT_CODE MESSAGE... (outside stages)
    local rc=$1; shift
    printf 'build.sh: error: %s\n' "$@" >&2
    exit "$rc"
}
# Inside a stage: record a clear error message and fail the stage.
# The message is shown after the log tail on exit (and then appended to the log).
stage_fail() {
    { printf 'error: %s\n' "$1"; shift; [[ $# -eq 0 ]] || printf '%s\n' "$@"; } >>"$CURRENT_ERRFILE"
    exit 1
}
note() { STAGE_NOTE=${STAGE_NOTE:+$STAGE_NOTE; }$*; }  # extra text for the status line
is_true() { [[ ${1:-0} =~ ^(1|yes|true|on)$ ]]; }

on_exit() {
    local rc=$?
    set +e
    if [[ $rc -ne 0 && -n $CURRENT_STAGE ]]; then
        # We may be exiting from inside a stage whose output goes to its log:
        # report on the terminal's stdout/stderr saved at startup.
        [[ $QUIET == 1 ]] || printf 'FAILED\n' >&"$OUT_FD"
        {
            printf '%s %s FAILED; last lines of %s:\n' "$(elapsed)" "$CURRENT_STAGE" "$CURRENT_LOG"
            tail -n 30 "$CURRENT_LOG" | sed 's/^/    | /'
            if [[ -s $CURRENT_ERRFILE ]]; then
                sed 's/^/build.sh: /' "$CURRENT_ERRFILE"
                cat "$CURRENT_ERRFILE" >>"$CURRENT_LOG"
            fi
            [[ -z $INTERRUPTED ]] || printf 'build.sh: interrupted by %s\n' "$INTERRUPTED"
            printf 'build.sh: stage "%s" failed; full log: %s\n' "$CURRENT_STAGE" "$CURRENT_LOG"
        } >&"$ERR_FD"
        rm -f "$CURRENT_ERRFILE"
    fi
    if [[ ${#ACTIVATE_RESTORE[@]} -eq 2 && -e ${ACTIVATE_RESTORE[0]} && ! -e ${ACTIVATE_RESTORE[1]} ]]; then
        mv -T "${ACTIVATE_RESTORE[0]}" "${ACTIVATE_RESTORE[1]}"
    fi
    local p
    for p in "${TMP_PATHS[@]}"; do [[ -e $p || -L $p ]] && rm -rf -- "$p"; done
    exit "$rc"
}
exec {OUT_FD}>&1 {ERR_FD}>&2
trap on_exit EXIT
INTERRUPTED=""
trap 'INTERRUPTED=SIGINT; exit 130' INT
trap 'INTERRUPTED=SIGTERM; exit 143' TERM
trap 'INTERRUPTED=SIGHUP; exit 129' HUP

# run_stage NAME FLAVOUR LOGDIR FUNC ARGS...: one status line, full log in LOGDIR/NAME.log.
# FUNC runs in this shell (so it can set globals) with errexit active.
run_stage() {
    local name=$1 flavour=$2 logdir=$3; shift 3
    mkdir -p "$logdir"
    CURRENT_STAGE="$name${flavour:+ $flavour}"
    CURRENT_LOG="$logdir/$name.log"
    CURRENT_ERRFILE="$logdir/.$name.err"
    STAGE_NOTE=""
    : >"$CURRENT_ERRFILE"
    { printf '== %s  %s\n' "$(date -u +%FT%TZ)" "$CURRENT_STAGE"; } >"$CURRENT_LOG"
    [[ $QUIET == 1 ]] || printf '%s %s ... ' "$(elapsed)" "$CURRENT_STAGE"
    local t0=$SECONDS
    "$@" >>"$CURRENT_LOG" 2>&1 </dev/null
    [[ $QUIET == 1 ]] || printf 'ok (%ds%s)\n' $((SECONDS - t0)) "${STAGE_NOTE:+, $STAGE_NOTE}"
    rm -f "$CURRENT_ERRFILE"
    CURRENT_STAGE="" CURRENT_LOG="" CURRENT_ERRFILE=""
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
sha256_str() { sha256sum | cut -d' ' -f1; }

# ---------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------
SOURCE=${BRC_MERGE_SOURCE:-}
CACHE=${BRC_MERGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/brc-merge}
DIST=${BRC_MERGE_DIST:-$ROOT/dist}
PREFIX=${BRC_MERGE_PREFIX:-}
JOBS=${BRC_MERGE_JOBS:-}
PATCHES=${BRC_MERGE_PATCHES:-$ROOT/patches/$SERIES_LINE}
OFFLINE=${BRC_MERGE_OFFLINE:-0}
OPTIMIZE=${BRC_MERGE_OPTIMIZE:-0}
NO_DEPS=${BRC_MERGE_NO_DEPS:-0}
MODE=build
FLAVOURS=()

parse_args() {
    while [[ $# -gt 0 ]]; do
        case $1 in
            --source|--cache|--dist|--jobs|--patches|--prefix)
                [[ $# -ge 2 && -n $2 ]] || die 2 "$1 needs a value (see --help)"
                case $1 in
                    --source) SOURCE=$2 ;; --cache) CACHE=$2 ;; --dist) DIST=$2 ;;
                    --jobs) JOBS=$2 ;; --patches) PATCHES=$2 ;; --prefix) PREFIX=$2 ;;
                esac
                shift 2 ;;
            --source=*) SOURCE=${1#*=}; shift ;;
            --cache=*) CACHE=${1#*=}; shift ;;
            --dist=*) DIST=${1#*=}; shift ;;
            --jobs=*) JOBS=${1#*=}; shift ;;
            --patches=*) PATCHES=${1#*=}; shift ;;
            --prefix=*) PREFIX=${1#*=}; shift ;;
            --offline) OFFLINE=1; shift ;;
            --optimize) OPTIMIZE=1; shift ;;
            --no-deps) NO_DEPS=1; shift ;;
            --quiet|-q) QUIET=1; shift ;;
            --update-checksums) MODE=update-checksums; shift ;;
            --check) MODE=check; shift ;;
            --print-config) MODE=print-config; shift ;;
            -h|--help) usage; exit 0 ;;
            --) shift; FLAVOURS+=("$@"); break ;;
            -*) die 2 "unknown option '$1' (see --help)" ;;
            *) FLAVOURS+=("$1"); shift ;;
        esac
    done
    is_true "$OFFLINE" && OFFLINE=1 || OFFLINE=0
    is_true "$OPTIMIZE" && OPTIMIZE=1 || OPTIMIZE=0
    is_true "$NO_DEPS" && NO_DEPS=1 || NO_DEPS=0
    is_true "$QUIET" && QUIET=1 || QUIET=0
    [[ -n $JOBS ]] || JOBS=$(nproc)
    [[ $JOBS =~ ^[1-9][0-9]*$ ]] || die 2 "--jobs/BRC_MERGE_JOBS must be a positive integer, got '$JOBS'"

    local f v bad=()
    for f in "${FLAVOURS[@]}"; do
        for v in "${VALID_FLAVOURS[@]}"; do [[ $f == "$v" ]] && continue 2; done
        bad+=("$f")
    done
    if [[ ${#bad[@]} -gt 0 ]]; then
        die 2 "unknown flavour(s): ${bad[*]}; valid flavours are: ${VALID_FLAVOURS[*]}"
    fi
    case $MODE in
        build|check) [[ ${#FLAVOURS[@]} -gt 0 ]] ||
            die 2 "no flavour given; valid flavours are: ${VALID_FLAVOURS[*]} (see --help)" ;;
        update-checksums|print-config) [[ ${#FLAVOURS[@]} -eq 0 ]] ||
            die 2 "--$MODE takes no flavour" ;;
    esac
    [[ -z $PREFIX || ${#FLAVOURS[@]} -le 1 ]] ||
        die 2 "--prefix/BRC_MERGE_PREFIX installs one flavour; got ${FLAVOURS[*]}"
    # Absolute paths: they end up in configure flags and symlinks.
    CACHE=$(realpath -m -- "$CACHE")
    DIST=$(realpath -m -- "$DIST")
    PATCHES=$(realpath -m -- "$PATCHES")
    [[ -z $SOURCE ]] || SOURCE=$(realpath -m -- "$SOURCE")
    [[ -z $PREFIX ]] || PREFIX=$(realpath -m -- "$PREFIX")
    [[ $PREFIX != / ]] || die 2 "--prefix/BRC_MERGE_PREFIX must not be /"
}

# Where FLAVOUR is installed: --prefix/BRC_MERGE_PREFIX, else $CACHE/install/FLAVOUR.
install_prefix() { printf '%s\n' "${PREFIX:-$CACHE/install/$1}"; }

# Load the pinned base; everything version-specific hangs off PY_VERSION.
load_base() {
    [[ -f $PATCHES/base ]] || die 2 "patch directory $PATCHES has no 'base' file"
    PY_VERSION="" URL="" SHA256=""
    # shellcheck source=patches/3.14/base
    . "$PATCHES/base"
    [[ $PY_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die 2 "$PATCHES/base: bad PY_VERSION '$PY_VERSION'"
    [[ $SHA256 =~ ^[0-9a-f]{64}$ ]] || die 2 "$PATCHES/base: bad SHA256 '$SHA256'"
    [[ -n $URL ]] || die 2 "$PATCHES/base: URL is empty"
    case $PY_VERSION in
        3.14.*) PY_MM=3.14 ;;
        *) die 2 "build.sh only knows the $SERIES_LINE line; $PATCHES/base pins $PY_VERSION" ;;
    esac
    TARBALL_NAME=${URL##*/}
    TREE_NAME=Python-$PY_VERSION
    SERIES_FILE=$PATCHES/series
    CHECKSUMS_FILE=$PATCHES/checksums
}

# Patch file names from the series (comments and blank lines dropped).
series_patches() {
    [[ -f $SERIES_FILE ]] || return 0
    sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$SERIES_FILE" | grep -v '^$' || true
}

# ---------------------------------------------------------------------------
# Stage: source
# ---------------------------------------------------------------------------
SOURCE_TREE=""
SOURCE_ID=""

source_help() {
    cat <<EOF
How to provide the CPython $PY_VERSION source (sha256 $SHA256):
  - point BRC_MERGE_SOURCE (or ./build.sh --source PATH) at the release tarball
    $TARBALL_NAME (.tgz or .tar.xz) or at an unpacked, unmodified tree; or
  - put the tarball at $CACHE/downloads/$TARBALL_NAME; or
  - put the unpacked tree at $CACHE/sources/$TREE_NAME; or
  - allow the download from $URL (unset BRC_MERGE_OFFLINE / drop --offline).
EOF
}

check_tarball() {  # check_tarball FILE
    local actual
    actual=$(sha256_of "$1")
    echo "tarball $1 sha256 $actual"
    if [[ $actual != "$SHA256" ]]; then
        stage_fail "tarball $1 has the wrong sha256" \
            "  expected $SHA256 (pinned in $PATCHES/base)" \
            "  actual   $actual" \
            "  fix: supply the genuine $TARBALL_NAME for CPython $PY_VERSION (or delete the file so it is downloaded again)"
    fi
    SOURCE_ID=tarball-$actual
}

# Unpack a verified tarball once into $CACHE/sources/<tree>-<sha12>, via a temp dir + rename.
unpack_tarball() {  # unpack_tarball FILE -> sets SOURCE_TREE
    local sha=${SOURCE_ID#tarball-}
    local dest=$CACHE/sources/$TREE_NAME-${sha:0:12}
    if [[ -f $dest/.brc-merge-unpacked ]]; then
        echo "reusing $dest"
        SOURCE_TREE=$dest
        return
    fi
    mkdir -p "$CACHE/sources"
    local lockfd tmp
    exec {lockfd}>"$CACHE/sources/.unpack.lock"   # builds of other flavours share it
    flock "$lockfd"
    if [[ -f $dest/.brc-merge-unpacked ]]; then
        echo "another build.sh unpacked it meanwhile; reusing $dest"
        exec {lockfd}>&-
        SOURCE_TREE=$dest
        return
    fi
    tmp=$(mktemp -d "$CACHE/sources/.unpack.XXXXXX")
    TMP_PATHS+=("$tmp")
    echo "unpacking $1 into $tmp"
    tar -xf "$1" -C "$tmp"
    [[ -d $tmp/$TREE_NAME ]] || stage_fail "tarball $1 does not contain $TREE_NAME/"
    echo "${SOURCE_ID#tarball-}" >"$tmp/$TREE_NAME/.brc-merge-unpacked"
    rm -rf -- "$dest"   # a partial earlier unpack (no marker)
    mv -T "$tmp/$TREE_NAME" "$dest"
    rm -rf -- "$tmp"
    exec {lockfd}>&-
    SOURCE_TREE=$dest
}

# verify_tree DIR [version-only]: pinned version, then every checksums line.
verify_tree() {
    local tree=$1 only_version=${2:-}
    [[ -f $tree/Include/patchlevel.h ]] ||
        stage_fail "$tree is not a CPython source tree (no Include/patchlevel.h)"
    local v
    v=$(sed -n 's/^#define[[:space:]]\{1,\}PY_VERSION[[:space:]]\{1,\}"\([^"]*\)".*/\1/p' "$tree/Include/patchlevel.h")
    echo "tree $tree has PY_VERSION $v"
    [[ $v == "$PY_VERSION" ]] ||
        stage_fail "source tree $tree is version ${v:-unknown}, expected $PY_VERSION (pinned in $PATCHES/base)" \
            "  fix: point BRC_MERGE_SOURCE/--source at a CPython $PY_VERSION tarball or tree"
    [[ -z $only_version ]] || return 0
    [[ -f $CHECKSUMS_FILE ]] ||
        stage_fail "$CHECKSUMS_FILE is missing; run ./build.sh --update-checksums"
    local sum path actual bad=() n=0
    while read -r sum path; do
        [[ -n $sum && $sum != \#* ]] || continue
        path=${path#\*}
        n=$((n + 1))
        if [[ ! -f $tree/$path ]]; then
            bad+=("$path (missing)")
            continue
        fi
        actual=$(sha256_of "$tree/$path")
        [[ $actual == "$sum" ]] || bad+=("$path")
    done <"$CHECKSUMS_FILE"
    echo "checked $n file(s) from $CHECKSUMS_FILE"
    if [[ ${#bad[@]} -gt 0 ]]; then
        stage_fail "source tree $tree differs from the pristine $PY_VERSION release in file(s) the patch series touches:" \
            "$(printf '    %s\n' "${bad[@]}")" \
            "  refusing to build from a modified tree; fix: restore the file(s) from the $TARBALL_NAME release" \
            "  (or pass the tarball via BRC_MERGE_SOURCE/--source). If you changed the series, run ./build.sh --update-checksums against a pristine tree."
    fi
    SOURCE_ID=tree-$( { echo "$PY_VERSION"; cat "$CHECKSUMS_FILE"; } | sha256_str)
}

use_source_path() {  # use_source_path PATH [version-only]
    local p=$1
    if [[ -d $p ]]; then
        SOURCE_TREE=$p
        verify_tree "$p" "${2:-}"
        note "tree $p"
    elif [[ -f $p ]]; then
        case $p in
            *.tgz|*.tar.gz|*.tar.xz|*.txz) ;;
            *) stage_fail "$p is neither a directory nor a .tgz/.tar.gz/.tar.xz tarball" ;;
        esac
        check_tarball "$p"
        note "tarball $p"
        if [[ ${3:-} == id-only ]]; then return; fi
        unpack_tarball "$p"
        local id=$SOURCE_ID
        verify_tree "$SOURCE_TREE" "${2:-}"
        SOURCE_ID=$id
    else
        stage_fail "source $p does not exist"
    fi
}

# stage_source [version-only]: resolve + verify; sets SOURCE_TREE/SOURCE_ID.
# A tarball is only unpacked when a tree is needed (ensure_source_tree).
SOURCE_TARBALL=""
stage_source() {
    local only_version=${1:-}
    local dl=$CACHE/downloads/$TARBALL_NAME tree=$CACHE/sources/$TREE_NAME
    if [[ -n $SOURCE ]]; then
        echo "using BRC_MERGE_SOURCE/--source: $SOURCE"
        [[ -e $SOURCE ]] || stage_fail "source $SOURCE (from BRC_MERGE_SOURCE/--source) does not exist" "$(source_help)"
        if [[ -f $SOURCE ]]; then SOURCE_TARBALL=$SOURCE; use_source_path "$SOURCE" "$only_version" id-only
        else use_source_path "$SOURCE" "$only_version"; fi
        return
    fi
    if [[ -f $dl ]]; then
        echo "using cached download $dl"
        SOURCE_TARBALL=$dl; use_source_path "$dl" "$only_version" id-only
        return
    fi
    if [[ -d $tree ]]; then
        echo "using cached tree $tree"
        use_source_path "$tree" "$only_version"
        return
    fi
    echo "no source at $dl or $tree"
    if [[ $OFFLINE == 1 ]]; then
        stage_fail "no CPython $PY_VERSION source found and downloading is disabled (BRC_MERGE_OFFLINE/--offline)" "$(source_help)"
    fi
    ensure_packages curl
    mkdir -p "$CACHE/downloads"
    local tmp
    tmp=$(mktemp "$CACHE/downloads/.$TARBALL_NAME.XXXXXX")
    TMP_PATHS+=("$tmp")
    echo "downloading $URL"
    local rc=0
    curl -fL --retry 2 --connect-timeout 20 --speed-limit 1000 --speed-time 60 -o "$tmp" "$URL" || rc=$?
    if [[ $rc -ne 0 ]]; then
        stage_fail "no CPython $PY_VERSION source found locally and the download from $URL failed (curl exit $rc)" "$(source_help)"
    fi
    check_tarball "$tmp"
    mv -f "$tmp" "$dl"
    SOURCE_TARBALL=$dl
    note "downloaded $dl"
}

# Make sure SOURCE_TREE is set (unpacks a verified tarball if needed).
ensure_source_tree() {
    [[ -z $SOURCE_TREE ]] || return 0
    local id=$SOURCE_ID
    unpack_tarball "$SOURCE_TARBALL"
    verify_tree "$SOURCE_TREE" "${1:-}"
    SOURCE_ID=$id
}

# ---------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------
configure_flags() {  # configure_flags FLAVOUR -> CONF_FLAGS array
    local -n own="CONFIGURE_FLAGS_${1//-/_}"
    CONF_FLAGS=(--prefix="$(install_prefix "$1")" "${CONFIGURE_FLAGS_COMMON[@]}" "${own[@]}")
    [[ $OPTIMIZE == 0 || -n ${FLAVOUR_CHECKING[$1]:-} ]] || CONF_FLAGS+=("${CONFIGURE_FLAGS_OPTIMIZE[@]}")
    CONF_FLAGS+=("CFLAGS=$CONFIGURE_CFLAGS")
}

# shellcheck disable=SC2086  # CC may carry arguments
cc_version() {  # cc_version FLAVOUR: the first line of the compiler's --version
    local cc=${CC:-cc}
    [[ -z ${1:-} ]] || cc=${FLAVOUR_CC[$1]:-$cc}
    $cc --version 2>/dev/null | sed -n 1p || echo "no compiler"
}

series_key() {  # sha256 of the series file and each listed patch (patched flavours)
    local p
    {
        [[ -f $SERIES_FILE ]] && cat "$SERIES_FILE"
        while read -r p; do
            if [[ -f $PATCHES/$p ]]; then echo "$p $(sha256_of "$PATCHES/$p")"
            else echo "$p MISSING"; fi
        done < <(series_patches)
    } | sha256_str
}

full_key() {  # full_key FLAVOUR
    local f=$1
    configure_flags "$f"
    printf 'key-scheme %s\n' "$KEY_SCHEME"
    printf 'flavour %s\n' "$f"
    printf 'python %s\n' "$PY_VERSION"
    printf 'source-id %s\n' "$SOURCE_ID"
    if [[ ${FLAVOUR_PATCHED[$f]} == 1 ]]; then
        printf 'series %s\n' "$(series_key)"
        local p
        while read -r p; do printf 'patch %s\n' "$p"; done < <(series_patches)
    else
        printf 'series none\n'
    fi
    printf 'configure %s\n' "${CONF_FLAGS[*]}"
    printf 'cc %s\n' "$(cc_version "$f")"
    printf 'optimize %s\n' "$OPTIMIZE"
    # Checking flavours install without pip and with a partial byte-compile.
    [[ -z ${FLAVOUR_CHECKING[$f]:-} ]] || printf 'install checking-1\n'
}

up_to_date() {  # up_to_date FLAVOUR KEY -> 0 if installed with this key
    local prefix
    prefix=$(install_prefix "$1")
    [[ -f $prefix/.brc-merge-key && -x $prefix/bin/python3 ]] && [[ "$(cat "$prefix/.brc-merge-key")" == "$2" ]]
}

# A --prefix that exists, is not empty and has no .brc-merge-key is not ours to replace.
foreign_prefix() {  # foreign_prefix FLAVOUR -> 0 if so
    local prefix
    prefix=$(install_prefix "$1")
    [[ -n $PREFIX && -e $prefix && ! -f $prefix/.brc-merge-key ]] && [[ -n "$(ls -A "$prefix")" ]]
}

dist_link_ok() { [[ -L $DIST/$1 && "$(readlink "$DIST/$1")" == "$(install_prefix "$1")" ]]; }

link_dist() {  # atomically point DIST/FLAVOUR at the install
    local f=$1
    mkdir -p "$DIST"
    if [[ -e $DIST/$f && ! -L $DIST/$f ]]; then
        die 1 "$DIST/$f exists and is not a symlink; move it away first"
    fi
    local tmp=$DIST/.$f.tmp.$$
    ln -sfn "$(install_prefix "$f")" "$tmp"
    mv -T "$tmp" "$DIST/$f"
}

# ---------------------------------------------------------------------------
# Build dependencies
# ---------------------------------------------------------------------------
missing_packages() {
    command -v dpkg-query >/dev/null || return 0
    local p
    for p in "$@"; do
        [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" == installed ]] || echo "$p"
    done
}

ensure_packages() {  # ensure_packages PKG...: install missing Debian packages (root) or explain
    if ! command -v dpkg-query >/dev/null; then
        echo "warning: no dpkg-query; cannot check for: $*"
        return 0
    fi
    local missing
    mapfile -t missing < <(missing_packages "$@")
    if [[ ${#missing[@]} -eq 0 ]]; then
        echo "all present: $*"
        return 0
    fi
    echo "missing packages: ${missing[*]}"
    if [[ $(id -u) -ne 0 ]]; then
        stage_fail "missing build dependencies: ${missing[*]}" \
            "  install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}"
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
    local still
    mapfile -t still < <(missing_packages "$@")
    [[ ${#still[@]} -eq 0 ]] || stage_fail "apt-get did not install: ${still[*]}"
    note "apt-get installed ${missing[*]}"
}

stage_deps() {  # stage_deps FLAVOUR
    local -a deps=("${BUILD_DEPS[@]}")
    # shellcheck disable=SC2206  # a space-separated package list
    [[ -z ${FLAVOUR_DEPS[$1]:-} ]] || deps+=(${FLAVOUR_DEPS[$1]})
    if [[ $NO_DEPS == 1 ]]; then
        echo "BRC_MERGE_NO_DEPS/--no-deps: not checking ${deps[*]}"
        note "skipped: --no-deps"
        return
    fi
    ensure_packages "${deps[@]}"
}

# ---------------------------------------------------------------------------
# Stage: patch (staging copy + series) and sync into the persistent work tree
# ---------------------------------------------------------------------------
# Parse GNU patch output for the files it could not patch.
rejected_files() {
    awk '
        /^(patching|checking) file / { f = $0; sub(/^(patching|checking) file /, "", f); gsub(/\047/, "", f); next }
        /FAILED|saving rejects/ { if (f != "") print f; next }
        /can.t find file to patch/ { lost = 1; next }
        lost && /^\|(---|\+\+\+) / {
            if (g == "") { g = $0; sub(/^\|(---|\+\+\+) /, "", g); sub(/\t.*$/, "", g)
                           if (g == "/dev/null") g = ""; else sub(/^[ab]\//, "", g) }
            next
        }
        lost && /No file to patch/ { print (g == "" ? "(unknown file)" : g " (missing)"); lost = 0; g = ""; next }
    ' | sort -u
}

apply_series() {  # apply_series DIR
    local dir=$1 p out rc rejected
    local -a patches
    mapfile -t patches < <(series_patches)
    for p in "${patches[@]}"; do
        [[ -f $PATCHES/$p ]] || stage_fail "patch $p listed in $SERIES_FILE does not exist in $PATCHES"
    done
    [[ ${#patches[@]} -eq 0 ]] || command -v patch >/dev/null || ensure_packages patch
    for p in "${patches[@]}"; do
        echo "--- applying $p"
        rc=0
        out=$(patch -d "$dir" -p1 --fuzz=0 --no-backup-if-mismatch -f -i "$PATCHES/$p" 2>&1 </dev/null) || rc=$?
        printf '%s\n' "$out"
        if [[ $rc -ne 0 ]]; then
            rejected=$(printf '%s\n' "$out" | rejected_files | tr '\n' ' ')
            rejected=${rejected% }
            stage_fail "patch $p does not apply cleanly (zero fuzz) to $PY_VERSION${rejected:+; rejected file(s): $rejected}" \
                "  patch file: $PATCHES/$p; rejects are left in $dir" \
                "  fix: rebase $p onto CPython $PY_VERSION"
        fi
    done
    note "${#patches[@]} patch(es)"
}

stage_patch() {  # stage_patch FLAVOUR
    local f=$1 b=$CACHE/build/$1
    ensure_source_tree
    rm -rf -- "$b/staging"
    mkdir -p "$b"
    echo "copying $SOURCE_TREE -> $b/staging"
    cp -a -- "$SOURCE_TREE" "$b/staging"
    rm -f "$b/staging/.brc-merge-unpacked"
    if [[ ${FLAVOUR_PATCHED[$f]} == 1 ]]; then
        apply_series "$b/staging"
    else
        note "unpatched"
    fi
    command -v rsync >/dev/null || ensure_packages rsync
    # No -t: files whose content is unchanged keep their mtime, so make only
    # rebuilds what a changed patch changed.
    echo "syncing staging -> $b/src"
    mkdir -p "$b/src"
    rsync -rlc --delete --itemize-changes "$b/staging/" "$b/src/" | sed -n '1,200p'
    rm -rf -- "$b/staging"
}

# ---------------------------------------------------------------------------
# Stages: configure, make, install, smoke, activate
# ---------------------------------------------------------------------------
stage_configure() {  # stage_configure FLAVOUR
    local f=$1 b=$CACHE/build/$1
    configure_flags "$f"
    local key
    key=$(printf '%s\n' "${CONF_FLAGS[@]}" "cc $(cc_version "$f")" "configure $(sha256_of "$b/src/configure")")
    if [[ -f $b/obj/Makefile && -f $b/obj/.brc-merge-configure-key ]] &&
        [[ "$(cat "$b/obj/.brc-merge-configure-key")" == "$key" ]]; then
        echo "configure key unchanged; not re-running configure"
        note "unchanged, not re-run"
        return
    fi
    if [[ -d $b/obj ]]; then
        echo "configure key changed; starting from an empty obj dir"
        rm -rf -- "$b/obj"
    fi
    mkdir -p "$b/obj"
    echo "configure key:"; printf '  %s\n' "$key"
    (cd "$b/obj" && ../src/configure "${CONF_FLAGS[@]}")
    printf '%s\n' "$key" >"$b/obj/.brc-merge-configure-key"
}

stage_make() {  # stage_make FLAVOUR
    make -C "$CACHE/build/$1/obj" -j"$JOBS"
}

# What `--with-ensurepip=install` does at `make install`, but with --ignore-installed:
# the bundled pip wheel, run by the build-dir python (so scripts get the final
# prefix in their shebang), installed under DESTDIR. Like ensurepip, ignore the
# user's pip configuration.
install_bundled_pip() {  # install_bundled_pip FLAVOUR DESTDIR
    local b=$CACHE/build/$1 whls v
    local -a unset_pip=()
    mapfile -t whls < <(compgen -G "$b/src/Lib/ensurepip/_bundled/pip-*.whl" || true)
    if [[ ${#whls[@]} -ne 1 ]]; then   # the smoke stage's pip check will tell
        echo "warning: expected one bundled pip wheel in $b/src/Lib/ensurepip/_bundled, found ${#whls[@]}; not installing pip"
        return 0
    fi
    for v in $(compgen -e); do [[ $v != PIP_* ]] || unset_pip+=(-u "$v"); done
    echo "installing ${whls[0]##*/} into $2"
    env "${unset_pip[@]}" PIP_CONFIG_FILE=/dev/null "$b/obj/python" -E -s "${whls[0]}/pip" install \
        --root "$2" --ignore-installed --no-index --no-cache-dir --no-warn-script-location \
        --disable-pip-version-check --root-user-action=ignore "${whls[0]}"
}

STAGED_PREFIX=""
stage_install() {  # stage_install FLAVOUR -> STAGED_PREFIX
    local f=$1
    mkdir -p "$CACHE/tmp"
    local stage
    stage=$(mktemp -d "$CACHE/tmp/install-$f.XXXXXX")
    TMP_PATHS+=("$stage")
    # ENSUREPIP=no, then install_bundled_pip: the Makefile's own ensurepip step
    # runs pip from the build dir, which finds the pip of an *existing* install at
    # the real prefix "already satisfied" and so puts no pip into DESTDIR.
    if [[ -n ${FLAVOUR_CHECKING[$f]:-} ]]; then
        # Checking flavours run CPython's tests, not pip; and the instrumented
        # interpreter byte-compiles slowly (three levels of the whole stdlib
        # take over 10 minutes under TSan), so compile only the top level of
        # Lib/; the rest is compiled on first import.
        make -C "$CACHE/build/$f/obj" install DESTDIR="$stage" ENSUREPIP=no \
            COMPILEALL_OPTS="-j0 -l"
        echo "checking flavour: pip not installed, Lib/ subpackages compiled on first import"
    else
        make -C "$CACHE/build/$f/obj" install DESTDIR="$stage" ENSUREPIP=no
        install_bundled_pip "$f" "$stage"
    fi
    STAGED_PREFIX=$stage$(install_prefix "$f")
    [[ -x $STAGED_PREFIX/bin/python3 ]] || stage_fail "make install did not produce $STAGED_PREFIX/bin/python3"
}

stage_smoke() {  # stage_smoke FLAVOUR PREFIX
    local f=$1 py=$2/bin/python3
    [[ -x $2/bin/python$PY_MM ]] || stage_fail "$2/bin/python$PY_MM is missing"
    local -a clean_env=(env -u PYTHONHOME -u PYTHONPATH -u PYTHONSTARTUP -u PYTHON_GIL)
    "${clean_env[@]}" "$py" -I -c 'import sys; print(sys.version); print(sys.prefix)' ||
        stage_fail "$py does not start"
    local gil
    gil=$("${clean_env[@]}" "$py" -I -c 'import sys; print(sys._is_gil_enabled())') ||
        stage_fail "$py: sys._is_gil_enabled() failed"
    echo "sys._is_gil_enabled() = $gil"
    [[ $gil == "${FLAVOUR_GIL[$f]}" ]] ||
        stage_fail "$f build has sys._is_gil_enabled() == $gil, expected ${FLAVOUR_GIL[$f]}"
    local ver
    ver=$("${clean_env[@]}" "$py" -I -c 'import platform; print(platform.python_version())')
    [[ $ver == "$PY_VERSION" ]] || stage_fail "$py reports version $ver, expected $PY_VERSION"
    local m failed=()
    for m in "${SMOKE_IMPORTS[@]}"; do
        "${clean_env[@]}" "$py" -I -c "import $m" || failed+=("$m")
    done
    [[ ${#failed[@]} -eq 0 ]] ||
        stage_fail "$f: cannot import ${failed[*]} (a build dependency is probably missing; see the make log's 'optional modules' summary)"
    if [[ -z ${FLAVOUR_CHECKING[$f]:-} ]]; then
        "${clean_env[@]}" "$py" -I -m pip --version || stage_fail "$f: python3 -m pip --version failed"
    fi
    local missing=()
    for m in "${SMOKE_OPTIONAL_IMPORTS[@]}"; do
        "${clean_env[@]}" "$py" -I -c "import $m" 2>/dev/null || missing+=("$m")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        echo "warning: optional modules not importable: ${missing[*]}"
        note "optional modules missing: ${missing[*]}"
    fi
}

stage_activate() {  # stage_activate FLAVOUR KEY
    local f=$1 key=$2 prefix
    prefix=$(install_prefix "$1")
    printf '%s\n' "$key" >"$STAGED_PREFIX/.brc-merge-key"
    # Never replace a directory we did not install (think --prefix /usr/local).
    ! foreign_prefix "$f" || stage_fail "refusing to replace $prefix: not empty and not a brc-merge install"
    mkdir -p "$(dirname "$prefix")"
    local old=""
    if [[ -e $prefix ]]; then
        old=$(dirname "$prefix")/.$(basename "$prefix").old.$$
        ACTIVATE_RESTORE=("$old" "$prefix")   # on_exit puts it back if we die here,
        TMP_PATHS+=("$old")                   # or deletes it if the new one is in
        mv -T "$prefix" "$old"
    fi
    mv -T "$STAGED_PREFIX" "$prefix"
    ACTIVATE_RESTORE=()
    [[ -z $old ]] || rm -rf -- "$old"
    link_dist "$f"
    echo "installed $prefix; $DIST/$f -> $prefix"
}

# ---------------------------------------------------------------------------
# Modes
# ---------------------------------------------------------------------------
resolve_source() {
    run_stage source "" "$CACHE/build/logs" stage_source
}

build_flavour() {  # build_flavour FLAVOUR
    local f=$1 b=$CACHE/build/$1 key
    mkdir -p "$CACHE/build"
    local lockfd
    exec {lockfd}>"$CACHE/build/$f.lock"
    if ! flock -n "$lockfd"; then
        say "$f: waiting for another build.sh holding $CACHE/build/$f.lock"
        flock "$lockfd"
    fi
    key=$(full_key "$f")
    if up_to_date "$f" "$key"; then
        if dist_link_ok "$f"; then
            say "$f up to date"
        else
            link_dist "$f"
            say "$f up to date (relinked $DIST/$f)"
        fi
        [[ $QUIET == 0 ]] || printf '%s %s -> %s (up to date)\n' "$(elapsed)" "$DIST/$f" "$(install_prefix "$f")"
        exec {lockfd}>&-
        return
    fi
    if foreign_prefix "$f"; then
        die 1 "refusing to install $f into $(install_prefix "$f"): it is not empty and not a brc-merge install (no .brc-merge-key); choose another --prefix/BRC_MERGE_PREFIX or remove it first"
    fi
    local logs=$b/logs
    run_stage patch "$f" "$logs" stage_patch "$f"
    run_stage deps "$f" "$logs" stage_deps "$f"
    key=$(full_key "$f")   # the compiler may only exist now
    run_stage configure "$f" "$logs" stage_configure "$f"
    run_stage make "$f" "$logs" stage_make "$f"
    run_stage install "$f" "$logs" stage_install "$f"
    run_stage smoke "$f" "$logs" stage_smoke "$f" "$STAGED_PREFIX"
    run_stage activate "$f" "$logs" stage_activate "$f" "$key"
    [[ $QUIET == 0 ]] || printf '%s %s -> %s (built)\n' "$(elapsed)" "$DIST/$f" "$(install_prefix "$f")"
    exec {lockfd}>&-
}

# Files a patch touches in the base tree: a-side of `diff --git a/X b/Y` and
# `--- a/X` headers; files the patch creates (new file / --- /dev/null) excluded.
# With CREATED=1, print only the files the patch creates instead.
patch_touched_files() {
    awk -v created="${CREATED:-0}" '
        function flush() {
            if (cur != "" && isnew == created) print cur
            cur = ""; isnew = 0
        }
        /^diff --git a\// {
            flush(); f = $0; sub(/^diff --git a\//, "", f); sub(/ b\/.*$/, "", f)
            cur = f; ingit = 1; next
        }
        /^new file mode/ { if (ingit) isnew = 1; next }
        /^--- / {
            f = $0; sub(/^--- /, "", f); sub(/\t.*$/, "", f)
            if (ingit == 1) { ingit = 2; if (f == "/dev/null") isnew = 1; next }
            flush(); ingit = 0
            if (f == "/dev/null") { isnew = 1; next }
            sub(/^a\//, "", f); cur = f; next
        }
        /^\+\+\+ / {
            # A plain diff creating a file names it only on the +++ line.
            if (isnew && cur == "") { f = $0; sub(/^\+\+\+ /, "", f); sub(/\t.*$/, "", f)
                                      sub(/^b\//, "", f); cur = f }
            next
        }
        END { flush() }
    ' "$@"
}

stage_update_checksums() {
    ensure_source_tree version-only
    local -a patches files
    local p
    mapfile -t patches < <(series_patches)
    for p in "${patches[@]}"; do
        [[ -f $PATCHES/$p ]] || stage_fail "patch $p listed in $SERIES_FILE does not exist in $PATCHES"
    done
    # A file that an earlier patch of the series creates is not in the base.
    mapfile -t files < <({
        printf '%s\n' Include/patchlevel.h configure
        declare -A created=()
        local t
        for p in "${patches[@]}"; do
            while IFS= read -r t; do
                [[ -n ${created[$t]:-} ]] || printf '%s\n' "$t"
            done < <(patch_touched_files "$PATCHES/$p")
            while IFS= read -r t; do created[$t]=1; done \
                < <(CREATED=1 patch_touched_files "$PATCHES/$p")
        done
    } | sort -u)
    local f missing=()
    for f in "${files[@]}"; do [[ -f $SOURCE_TREE/$f ]] || missing+=("$f"); done
    [[ ${#missing[@]} -eq 0 ]] ||
        stage_fail "the series modifies file(s) that are not in the $PY_VERSION tree $SOURCE_TREE: ${missing[*]}"
    local tmp
    tmp=$(mktemp "$CHECKSUMS_FILE.XXXXXX")
    TMP_PATHS+=("$tmp")
    (cd "$SOURCE_TREE" && sha256sum -- "${files[@]}") >"$tmp"
    if [[ -f $CHECKSUMS_FILE ]]; then
        echo "changes:"; diff "$CHECKSUMS_FILE" "$tmp" || true
    fi
    chmod 644 "$tmp"  # mktemp makes it 0600; a clone has 0644
    mv -f "$tmp" "$CHECKSUMS_FILE"
    echo "wrote $CHECKSUMS_FILE:"; cat "$CHECKSUMS_FILE"
    note "${#files[@]} file(s) in ${CHECKSUMS_FILE#"$ROOT"/}"
}

main() {
    parse_args "$@"
    load_base
    case $MODE in
        print-config)
            printf '%s=%s\n' BRC_MERGE_SOURCE "$SOURCE" BRC_MERGE_CACHE "$CACHE" \
                BRC_MERGE_DIST "$DIST" BRC_MERGE_PREFIX "$PREFIX" BRC_MERGE_JOBS "$JOBS" BRC_MERGE_PATCHES "$PATCHES" \
                BRC_MERGE_OFFLINE "$OFFLINE" BRC_MERGE_OPTIMIZE "$OPTIMIZE" BRC_MERGE_NO_DEPS "$NO_DEPS" \
                BRC_MERGE_QUIET "$QUIET" PY_VERSION "$PY_VERSION"
            return ;;
        update-checksums)
            run_stage source "" "$CACHE/build/logs" stage_source version-only
            run_stage update-checksums "" "$CACHE/build/logs" stage_update_checksums
            [[ $QUIET == 1 ]] || sed 's/^/  /' "$CHECKSUMS_FILE"
            return ;;
        check)
            resolve_source
            local f rc=0
            for f in "${FLAVOURS[@]}"; do
                if up_to_date "$f" "$(full_key "$f")"; then echo "$f up to date"
                else echo "$f needs a build"; rc=3; fi
            done
            return $rc ;;
    esac
    resolve_source
    local f
    for f in "${FLAVOURS[@]}"; do build_flavour "$f"; done
}

main "$@"; exit
