#!/usr/bin/env bash
# build.sh - build the brc-merge CPython flavours (stock GIL, stock free-threaded,
# free-threaded + our biased-refcounting patch series) from one verified source.
# Run `./build.sh --help` for usage.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
START=$SECONDS

# The lines this script builds, each with its own patches/<line>/ (base,
# series, checksums): 3.14 (a release, verified by its tarball's sha256) and
# main (a pinned commit of CPython's main branch, verified by the checksums of
# the files the series touches, or exported from a git directory that has the
# commit). Everything version-specific is keyed on $PATCHES/base.
VALID_LINES=(3.14 main)
DEFAULT_LINE=3.14
SERIES_LINE=$DEFAULT_LINE

# ---------------------------------------------------------------------------
# Flavours: the ONE place that defines them. `./build.sh --list` prints this
# table; the Makefile, tests/, bench/ and image/ read that, not lists of their own.
# ---------------------------------------------------------------------------
# One row per flavour, blank-separated; the description is the rest of the row.
#   line       3.14 | main: its patches/<line>/ and source
#   group      core (every build and test run), main (CPython main), checking
#              (debug and sanitizer builds), compare (comparison only)
#   gil        sys._is_gil_enabled() of the build (the smoke stage checks it)
#   patches    series = patches/<line>/series; - = stock; else another series of
#              patches/<line>/ applied to the stock base instead (the comparison
#              flavours: never shipped in an image or a tarball)
#   checking   1: no PGO/LTO even with --optimize (PGO under TSan would take an
#              hour and tells nothing; a debug build must stay -Og to be
#              debuggable); installed without pip, Lib/ partly byte-compiled
#   san        tsan | asan | -: the sanitizer, built with SAN_CC (below)
#   configure  its configure flags, comma-separated (- none), after
#              CONFIGURE_FLAGS_COMMON; a sanitizer adds CC=SAN_CC CXX=SAN_CXX
# (Keys hold the configure flags as they come out: keep their order and spelling.)
# (read -d '' reads to the end and so returns 1.)
IFS= read -r -d '' FLAVOUR_TABLE <<'EOF' || true
# flavour         line group    gil   patches                 checking san  configure                                             description
gil               3.14 core     True  -                       0        -    -                                                     stock CPython, GIL enabled
ft                3.14 core     False -                       0        -    --disable-gil                                         stock CPython, free-threaded (--disable-gil)
ft-brc            3.14 core     False series                  0        -    --disable-gil                                         free-threaded + patch series (upstream's BRC fix + follow-ups)
ft-brc-debug      3.14 checking False series                  1        -    --disable-gil,--with-pydebug                          ft-brc with --with-pydebug (assertions, refleak runs)
ft-tsan           3.14 checking False -                       1        tsan --disable-gil,--with-thread-sanitizer,--with-pydebug  stock free-threaded, ThreadSanitizer + pydebug (clang)
ft-brc-tsan       3.14 checking False series                  1        tsan --disable-gil,--with-thread-sanitizer,--with-pydebug  ft-brc, ThreadSanitizer + pydebug (clang)
ft-asan           3.14 checking False -                       1        asan --disable-gil,--with-address-sanitizer,--with-pydebug stock free-threaded, AddressSanitizer + pydebug (clang)
ft-brc-asan       3.14 checking False series                  1        asan --disable-gil,--with-address-sanitizer,--with-pydebug ft-brc, AddressSanitizer + pydebug (clang)
main-ft           main main     False -                       0        -    --disable-gil                                         stock CPython main (pinned commit), free-threaded
main-ft-brc       main main     False series                  0        -    --disable-gil                                         main-ft + patches/main series (BRC merge)
ft-upstream       3.14 compare  False compare/upstream.series 0        -    --disable-gil                                         ft + the series' first patch alone: upstream's gh-157838 fix (comparison only)
main-ft-upstream  main compare  False compare/upstream.series 0        -    --disable-gil                                         main-ft + the same backport (comparison only)
ft-upstream-debug 3.14 compare  False compare/upstream.series 1        -    --disable-gil,--with-pydebug                          ft-upstream with --with-pydebug (its assertions, comparison only)
EOF
VALID_GROUPS=(core main checking compare)
CONFIGURE_FLAGS_COMMON=(--with-ensurepip=install)

# The sanitizer flavours: clang-16, --with-pydebug, as CPython's own sanitizer
# CI builds them (gcc's TSan does not model the atomic fences CPython and
# mimalloc use and reports more noise); one toolchain for TSan and ASan.
SAN_CC=clang-16
SAN_CXX=clang++-16
# llvm-16 for its llvm-symbolizer: the sanitizer runtimes need their own LLVM's
# (Debian's default is LLVM 14's), or reports have no function names and
# suppressions (which match names) match nothing.
SAN_DEPS=(clang-16 libclang-rt-16-dev llvm-16)
# ASan: --with-address-sanitizer turns pymalloc off, but the free-threaded build
# allocates objects with mimalloc, which ASan knows nothing about unless
# mimalloc tells it: MI_TRACK_ASAN (freed blocks poisoned, so a use after free
# shows as use-after-poison) is a compile-time define for every file that
# includes mimalloc's types.h, hence CFLAGS. -fsanitize-recover=address: with
# ASAN_OPTIONS halt_on_error=0 one run lists every report (each still fails).
declare -A SAN_CFLAGS=([tsan]="" [asan]="-DMI_TRACK_ASAN=1 -fsanitize-recover=address")
# Checking-only patches applied after the series (if any): checking/<name>.series;
# asan's marks the free-threaded build's deliberate optimistic reads of
# possibly freed objects.
declare -A SAN_CHECK_SERIES=([tsan]="" [asan]=asan)
# The build runs the new interpreter (install byte-compiles, smoke): CPython
# frees not everything at exit by design, so no LeakSanitizer there.
declare -A SAN_ENV=([tsan]="" [asan]="ASAN_OPTIONS=detect_leaks=0")

# The table as arrays keyed by flavour (unset = empty/no).
VALID_FLAVOURS=()
declare -A FLAVOUR_LINE=() FLAVOUR_GROUP=() FLAVOUR_GIL=() FLAVOUR_DESC=() FLAVOUR_PATCHED=() \
    FLAVOUR_SERIES=() FLAVOUR_CHECKING=() FLAVOUR_SAN=() FLAVOUR_CONFIGURE=() FLAVOUR_CFLAGS=() \
    FLAVOUR_CHECK_SERIES=() FLAVOUR_ENV=() FLAVOUR_CC=() FLAVOUR_DEPS=()
while read -r f line group gil patches checking san conf desc; do
    [[ -n $f && $f != '#'* ]] || continue
    if [[ " ${VALID_LINES[*]} " != *" $line "* || " ${VALID_GROUPS[*]} " != *" $group "* ||
          ($gil != True && $gil != False) || ($checking != 0 && $checking != 1) ||
          ($san != - && -z ${SAN_CFLAGS[$san]+set}) || -z $desc ]]; then
        printf 'build.sh: error: FLAVOUR_TABLE: bad row for %s\n' "$f" >&2
        exit 70
    fi
    VALID_FLAVOURS+=("$f")
    FLAVOUR_LINE[$f]=$line FLAVOUR_GROUP[$f]=$group FLAVOUR_GIL[$f]=$gil FLAVOUR_DESC[$f]=$desc
    FLAVOUR_SAN[$f]=$san FLAVOUR_PATCHED[$f]=0
    case $patches in
        series) FLAVOUR_PATCHED[$f]=1 ;;
        -) ;;
        *) FLAVOUR_SERIES[$f]=$patches ;;
    esac
    [[ $checking == 0 ]] || FLAVOUR_CHECKING[$f]=1
    [[ $conf != - ]] || conf=""
    conf=${conf//,/ }
    if [[ $san != - ]]; then
        conf+=" CC=$SAN_CC CXX=$SAN_CXX"
        FLAVOUR_CC[$f]=$SAN_CC FLAVOUR_DEPS[$f]=${SAN_DEPS[*]}
        [[ -z ${SAN_CFLAGS[$san]} ]] || FLAVOUR_CFLAGS[$f]=${SAN_CFLAGS[$san]}
        [[ -z ${SAN_CHECK_SERIES[$san]} ]] || FLAVOUR_CHECK_SERIES[$f]=${SAN_CHECK_SERIES[$san]}
        [[ -z ${SAN_ENV[$san]} ]] || FLAVOUR_ENV[$f]=${SAN_ENV[$san]}
    fi
    FLAVOUR_CONFIGURE[$f]=${conf# }
done <<<"$FLAVOUR_TABLE"
unset f line group gil patches checking san conf desc
CONFIGURE_FLAGS_OPTIMIZE=(--enable-optimizations --with-lto)
# Keep frame pointers: we profile these builds.
CONFIGURE_CFLAGS="-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer"

# Debian packages needed to build CPython with all the modules we smoke-test.
BUILD_DEPS=(build-essential pkg-config libssl-dev zlib1g-dev libbz2-dev
    libreadline-dev libsqlite3-dev libffi-dev liblzma-dev libgdbm-dev tk-dev
    uuid-dev libncurses-dev libzstd-dev rsync curl patch)

# Smoke test: these imports must work; the optional ones only warn.
SMOKE_IMPORTS=(ssl sqlite3 zlib ctypes venv)
# main no longer bundles libmpdec (build.sh supplies one, see stage_mpdec):
# the C decimal module must be there, not only the pure-Python fallback.
declare -A LINE_SMOKE_IMPORTS=([main]="_decimal")
SMOKE_OPTIONAL_IMPORTS=(bz2 lzma readline curses dbm.gnu uuid tkinter compression.zstd)

KEY_SCHEME=1   # bump to force rebuilds when the meaning of the key changes

# ---------------------------------------------------------------------------
usage() {
    cat <<EOF
Usage: ./build.sh [OPTIONS] FLAVOUR...
       ./build.sh [OPTIONS] --update-checksums
       ./build.sh [OPTIONS] --check FLAVOUR...

Builds CPython (the base pinned in patches/<line>/base: 3.14 = a release,
main = a commit of CPython's main branch) and installs each FLAVOUR into
\$CACHE/install/FLAVOUR, with DIST/FLAVOUR a symlink to it.

Flavours:
$(for f in "${VALID_FLAVOURS[@]}"; do printf '  %-16s %s\n' "$f" "${FLAVOUR_DESC[$f]}"; done)

Options (each has an environment equivalent; the flag wins):
  --source PATH     BRC_MERGE_SOURCE   CPython tarball (.tgz/.tar.xz) or unpacked tree; for
                                       main also a git directory with the pinned commit
  --cache DIR       BRC_MERGE_CACHE    default \${XDG_CACHE_HOME:-\$HOME/.cache}/brc-merge
  --dist DIR        BRC_MERGE_DIST     default <repo>/dist
  --prefix DIR      BRC_MERGE_PREFIX   install prefix (one FLAVOUR only); default \$CACHE/install/FLAVOUR
  --jobs N          BRC_MERGE_JOBS     default: nproc
  --patches DIR     BRC_MERGE_PATCHES  default <repo>/patches/<line> (base, series, checksums)
  --line LINE       BRC_MERGE_LINE     the line for --update-checksums/--print-config: ${VALID_LINES[*]}
                                       (default $DEFAULT_LINE; flavours name their own line)
  --offline         BRC_MERGE_OFFLINE=1   never download the source
  --optimize        BRC_MERGE_OPTIMIZE=1  --enable-optimizations --with-lto (slow)
  --no-deps         BRC_MERGE_NO_DEPS=1   skip the Debian build-dependency check/install
  --quiet           BRC_MERGE_QUIET=1     only print errors and one line per flavour
  --update-checksums  recompute PATCHES/checksums from the files the series touches
  --check           exit 0 if every FLAVOUR is up to date, 3 if any needs a build
  --print-config    print the resolved settings and exit
  --list [GROUP...] print the flavour table (tab-separated; a first '#' line names
                    the columns: flavour line group gil description ...), or the
                    flavours of each GROUP, one a line: ${VALID_GROUPS[*]}
  -h, --help        this help

Source lookup order: --source/BRC_MERGE_SOURCE; \$CACHE/downloads/Python-<ver>.tgz;
\$CACHE/sources/Python-<ver>/; download (unless offline). Tarballs must match the
pinned sha256; trees must have the pinned version and match PATCHES/checksums.
main: \$CACHE/sources/cpython-<commit>/, a git directory (exported with git archive),
or the archive of the commit, each checked against patches/main/checksums.
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
PATCHES=${BRC_MERGE_PATCHES:-}
LINE=${BRC_MERGE_LINE:-}
OFFLINE=${BRC_MERGE_OFFLINE:-0}
OPTIMIZE=${BRC_MERGE_OPTIMIZE:-0}
NO_DEPS=${BRC_MERGE_NO_DEPS:-0}
MODE=build
FLAVOURS=()

parse_args() {
    while [[ $# -gt 0 ]]; do
        case $1 in
            --source|--cache|--dist|--jobs|--patches|--prefix|--line)
                [[ $# -ge 2 && -n $2 ]] || die 2 "$1 needs a value (see --help)"
                case $1 in
                    --source) SOURCE=$2 ;; --cache) CACHE=$2 ;; --dist) DIST=$2 ;;
                    --jobs) JOBS=$2 ;; --patches) PATCHES=$2 ;; --prefix) PREFIX=$2 ;;
                    --line) LINE=$2 ;;
                esac
                shift 2 ;;
            --line=*) LINE=${1#*=}; shift ;;
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
            --list) shift; list_flavours "$@"; exit 0 ;;
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
    # The lines to work on: --line/BRC_MERGE_LINE for the modes that take no
    # flavour, else those of the flavours, in the order given.
    local l lines=()
    if [[ -n $LINE ]]; then
        for l in "${VALID_LINES[@]}"; do [[ $LINE == "$l" ]] && break; done
        [[ $LINE == "$l" ]] || die 2 "unknown line '$LINE'; valid lines are: ${VALID_LINES[*]}"
    fi
    for f in "${FLAVOURS[@]}"; do
        l=${FLAVOUR_LINE[$f]:-$DEFAULT_LINE}
        [[ " ${lines[*]} " == *" $l "* ]] || lines+=("$l")
        [[ -z $LINE || $LINE == "$l" ]] ||
            die 2 "flavour $f is of the $l line, not --line/BRC_MERGE_LINE $LINE"
    done
    [[ ${#lines[@]} -gt 0 ]] || lines=("${LINE:-$DEFAULT_LINE}")
    LINES=("${lines[@]}")
    [[ -z $PATCHES || ${#LINES[@]} -eq 1 ]] ||
        die 2 "--patches/BRC_MERGE_PATCHES names one line's patches; the flavours ${FLAVOURS[*]} are of the lines ${LINES[*]}"
    # Absolute paths: they end up in configure flags and symlinks.
    CACHE=$(realpath -m -- "$CACHE")
    DIST=$(realpath -m -- "$DIST")
    [[ -z $PATCHES ]] || PATCHES=$(realpath -m -- "$PATCHES")
    USER_PATCHES=$PATCHES
    [[ -z $SOURCE ]] || SOURCE=$(realpath -m -- "$SOURCE")
    [[ -z $PREFIX ]] || PREFIX=$(realpath -m -- "$PREFIX")
    [[ $PREFIX != / ]] || die 2 "--prefix/BRC_MERGE_PREFIX must not be /"
}

# --list [GROUP...]: the flavour table, tab-separated under a '#' line naming
# the columns (the first five stay first: other code reads them), or the
# flavours of the GROUPs, one a line, in table order. Nothing else is checked.
list_flavours() {
    local f g patches
    for g in "$@"; do
        [[ " ${VALID_GROUPS[*]} " == *" $g "* ]] ||
            die 2 "unknown group '$g'; valid groups are: ${VALID_GROUPS[*]}"
    done
    if [[ $# -eq 0 ]]; then
        printf '# flavour\tline\tgroup\tgil\tdescription\tpatches\tchecking\tsan\n'
        for f in "${VALID_FLAVOURS[@]}"; do
            patches=${FLAVOUR_SERIES[$f]:--}
            [[ ${FLAVOUR_PATCHED[$f]} == 0 ]] || patches=series
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$f" "${FLAVOUR_LINE[$f]}" "${FLAVOUR_GROUP[$f]}" \
                "${FLAVOUR_GIL[$f]}" "${FLAVOUR_DESC[$f]}" "$patches" "${FLAVOUR_CHECKING[$f]:-0}" "${FLAVOUR_SAN[$f]}"
        done
        return
    fi
    for f in "${VALID_FLAVOURS[@]}"; do
        [[ " $* " != *" ${FLAVOUR_GROUP[$f]} "* ]] || printf '%s\n' "$f"
    done
}

# Where FLAVOUR is installed: --prefix/BRC_MERGE_PREFIX, else $CACHE/install/FLAVOUR.
install_prefix() { printf '%s\n' "${PREFIX:-$CACHE/install/$1}"; }

# select_line LINE: work on LINE from now on (its patches and its source).
select_line() {
    SERIES_LINE=$1
    PATCHES=${USER_PATCHES:-$ROOT/patches/$SERIES_LINE}
    SOURCE_TREE="" SOURCE_ID="" SOURCE_TARBALL=""
    load_base
}

# Load the pinned base; everything version-specific hangs off PY_VERSION.
# A release pins SHA256 (its tarball); a commit of main pins COMMIT instead.
load_base() {
    [[ -f $PATCHES/base ]] || die 2 "patch directory $PATCHES has no 'base' file"
    PY_VERSION="" URL="" SHA256="" COMMIT="" EXCLUDE=""
    # shellcheck source=patches/3.14/base
    . "$PATCHES/base"
    [[ -n $URL ]] || die 2 "$PATCHES/base: URL is empty"
    case $SERIES_LINE in
        main)
            [[ $PY_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+(a|b|rc)[0-9]+$ ]] ||
                die 2 "$PATCHES/base: bad PY_VERSION '$PY_VERSION' for the main line (e.g. 3.16.0a0)"
            [[ $COMMIT =~ ^[0-9a-f]{40}$ ]] || die 2 "$PATCHES/base: bad COMMIT '$COMMIT' (a full commit id)"
            TREE_NAME=cpython-$COMMIT   # as GitHub's archive of the commit unpacks
            TARBALL_NAME=$TREE_NAME.tar.gz ;;
        *)
            [[ $PY_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die 2 "$PATCHES/base: bad PY_VERSION '$PY_VERSION'"
            [[ $SHA256 =~ ^[0-9a-f]{64}$ ]] || die 2 "$PATCHES/base: bad SHA256 '$SHA256'"
            [[ $PY_VERSION == "$SERIES_LINE".* ]] ||
                die 2 "$PATCHES/base pins $PY_VERSION, which is not of the $SERIES_LINE line"
            TREE_NAME=Python-$PY_VERSION
            TARBALL_NAME=${URL##*/} ;;
    esac
    PY_MM=$(printf '%s\n' "$PY_VERSION" | sed -E 's/^([0-9]+\.[0-9]+).*/\1/')
    SERIES_FILE=$PATCHES/series
    CHECKSUMS_FILE=$PATCHES/checksums
}

# Patch file names from a series file (default: the series; comments and
# blank lines dropped). Names are relative to the series file's directory.
series_patches() {  # series_patches [SERIES_FILE]
    local file=${1:-$SERIES_FILE}
    [[ -f $file ]] || return 0
    sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$file" | grep -v '^$' || true
}

# The checking series of FLAVOUR (empty if it has none): checking-only patches
# applied after the series (on the stock tree for unpatched flavours).
check_series_file() {  # check_series_file FLAVOUR
    [[ -z ${FLAVOUR_CHECK_SERIES[$1]:-} ]] || printf '%s\n' "$PATCHES/checking/${FLAVOUR_CHECK_SERIES[$1]}.series"
}

# ---------------------------------------------------------------------------
# Stage: source
# ---------------------------------------------------------------------------
SOURCE_TREE=""
SOURCE_ID=""

source_help() {
    if [[ $SERIES_LINE == main ]]; then
        cat <<EOF
How to provide CPython main at commit $COMMIT ($PY_VERSION):
  - point BRC_MERGE_SOURCE (or ./build.sh --source PATH) at a git directory
    (a clone or a bare mirror) that has the commit: build.sh exports it with
    git archive into $CACHE/sources/$TREE_NAME; or
  - at an unpacked tree of that commit, or at its archive $TARBALL_NAME
    (a tree is checked against $CHECKSUMS_FILE); or
  - put the tree at $CACHE/sources/$TREE_NAME or the archive at
    $CACHE/downloads/$TARBALL_NAME; or
  - allow the download from $URL (unset BRC_MERGE_OFFLINE / drop --offline).
EOF
        return
    fi
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
    # main pins no tarball digest (archives of a commit are not byte-stable):
    # the unpacked tree is verified instead (ensure_source_tree).
    if [[ -n $SHA256 && $actual != "$SHA256" ]]; then
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

# Is DIR a git directory (a work tree's top, or a bare repository)?
git_dir_of() {  # git_dir_of DIR -> the git dir, or fails
    if [[ -d $1/.git ]]; then printf '%s\n' "$1/.git"
    elif [[ -f $1/HEAD && -d $1/objects && -d $1/refs ]]; then printf '%s\n' "$1"
    else return 1; fi
}

# export_git_source GITDIR [version-only]: export the pinned COMMIT (main
# line) once into $CACHE/sources/$TREE_NAME, via a temp dir + rename, and
# verify it like any tree.
export_git_source() {
    local g=$1 gd dest=$CACHE/sources/$TREE_NAME
    gd=$(git_dir_of "$g")
    [[ -n $COMMIT ]] ||
        stage_fail "$g is a git directory, but the $SERIES_LINE line pins a release, not a commit; use its tarball or tree"
    command -v git >/dev/null || ensure_packages git
    git --git-dir="$gd" cat-file -e "$COMMIT^{commit}" 2>/dev/null ||
        stage_fail "git directory $g does not have commit $COMMIT (pinned in $PATCHES/base)" \
            "  fix: fetch that commit into it, or point BRC_MERGE_SOURCE/--source at another copy of CPython's main branch"
    if [[ -f $dest/.brc-merge-unpacked ]]; then
        echo "reusing $dest"
    else
        mkdir -p "$CACHE/sources"
        local tmp e
        local -a ex=()
        for e in $EXCLUDE; do ex+=(":(exclude)$e"); done
        tmp=$(mktemp -d "$CACHE/sources/.$TREE_NAME.XXXXXX")
        TMP_PATHS+=("$tmp")
        echo "exporting $COMMIT from $gd into $dest${EXCLUDE:+ (without $EXCLUDE)}"
        git --git-dir="$gd" archive --prefix="$TREE_NAME/" "$COMMIT" -- . "${ex[@]}" | tar -x -C "$tmp"
        echo "git-$COMMIT" >"$tmp/$TREE_NAME/.brc-merge-unpacked"
        rm -rf -- "$dest"
        mv -T "$tmp/$TREE_NAME" "$dest"
        rm -rf -- "$tmp"
    fi
    SOURCE_TREE=$dest
    verify_tree "$dest" "${2:-}"
    note "git $g at ${COMMIT:0:12}"
}

use_source_path() {  # use_source_path PATH [version-only]
    local p=$1
    if [[ -d $p ]] && git_dir_of "$p" >/dev/null; then
        export_git_source "$p" "${2:-}"
    elif [[ -d $p ]]; then
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
    local -a own
    read -ra own <<<"${FLAVOUR_CONFIGURE[$1]}"
    CONF_FLAGS=(--prefix="$(install_prefix "$1")" "${CONFIGURE_FLAGS_COMMON[@]}" "${own[@]}")
    [[ $OPTIMIZE == 0 || -n ${FLAVOUR_CHECKING[$1]:-} ]] || CONF_FLAGS+=("${CONFIGURE_FLAGS_OPTIMIZE[@]}")
    CONF_FLAGS+=("CFLAGS=$CONFIGURE_CFLAGS${FLAVOUR_CFLAGS[$1]:+ ${FLAVOUR_CFLAGS[$1]}}")
    if [[ ${FLAVOUR_LINE[$1]:-$DEFAULT_LINE} == main ]]; then
        mpdec_configure_flags
        CONF_FLAGS+=("${MPDEC_FLAGS[@]}")
    fi
}

# ---------------------------------------------------------------------------
# libmpdec for the main line
# ---------------------------------------------------------------------------
# CPython main no longer bundles libmpdec (the C decimal module's library); it
# wants a system one (>= 2.5.0), and Debian 12 has no libmpdec-dev. So unless
# pkg-config finds one, build.sh builds the libmpdec that the 3.14 line's
# verified source bundles, once, into $CACHE/libmpdec/, and hands it to
# main's configure (LIBMPDEC_CFLAGS / LIBMPDEC_LIBS).
MPDEC_VERSION=2.5.1
MPDEC_OBJS=(basearith constants context convolute crt difradix2 fnt fourstep io
    mpalloc mpdecimal numbertheory sixstep transpose)
mpdec_dir() { printf '%s\n' "$CACHE/libmpdec/$MPDEC_VERSION-$(uname -m)"; }
system_mpdec() { command -v pkg-config >/dev/null && pkg-config --exists 'libmpdec >= 2.5.0'; }
# The bundled header leaves the word size to the compiler flags (as CPython's
# own configure does for it: the portable ANSI variants).
mpdec_machine_cflags() {
    case $(uname -m) in
        x86_64|aarch64|arm64|ppc64le|s390x|riscv64) echo "-DCONFIG_64=1 -DANSI=1 -DHAVE_UINT128_T=1" ;;
        *) echo "-DCONFIG_32=1 -DANSI=1" ;;
    esac
}
mpdec_configure_flags() {  # -> MPDEC_FLAGS (empty where pkg-config finds libmpdec)
    MPDEC_FLAGS=()
    ! system_mpdec || return 0
    local d
    d=$(mpdec_dir)
    MPDEC_FLAGS=("LIBMPDEC_CFLAGS=-I$d/include $(mpdec_machine_cflags)"
                 "LIBMPDEC_LIBS=$d/lib/libmpdec.a -lm")
}

stage_mpdec() {  # stage_mpdec FLAVOUR
    if system_mpdec; then
        echo "using the system libmpdec $(pkg-config --modversion libmpdec)"
        note "system libmpdec"
        return
    fi
    local d
    d=$(mpdec_dir)
    if [[ -f $d/lib/libmpdec.a && -f $d/include/mpdecimal.h ]]; then
        echo "using $d"
        note "libmpdec $MPDEC_VERSION (cached)"
        return
    fi
    # The 3.14 line's source, found and verified as for its own flavours
    # (never the main source that --source may name).
    local src
    src=$( (USER_PATCHES="" SOURCE=""; select_line "$DEFAULT_LINE"
            stage_source >&2; ensure_source_tree >&2; printf '%s\n' "$SOURCE_TREE") ) ||
        stage_fail "main needs libmpdec >= 2.5.0 and no verified CPython $DEFAULT_LINE source was found to build it from" \
            "  fix: install libmpdec >= 2.5.0 with its pkg-config file (Debian 13: apt-get install libmpdec-dev)," \
            "  or make the $DEFAULT_LINE source available as for the $DEFAULT_LINE flavours (./build.sh ft shows how)"
    local lib=$src/Modules/_decimal/libmpdec o
    grep -q "define MPD_VERSION \"$MPDEC_VERSION\"" "$lib/mpdecimal.h" ||
        stage_fail "$lib/mpdecimal.h is not libmpdec $MPDEC_VERSION"
    mkdir -p "$CACHE/tmp"
    local tmp
    tmp=$(mktemp -d "$CACHE/tmp/libmpdec.XXXXXX")
    TMP_PATHS+=("$tmp")
    mkdir -p "$tmp/obj" "$tmp/cfg" "$tmp/out/lib" "$tmp/out/include"
    # The bundled header includes CPython's pyconfig.h; the library needs
    # nothing from it (the word size comes from the flags), so an empty one.
    : >"$tmp/cfg/pyconfig.h"
    echo "building libmpdec $MPDEC_VERSION from $lib"
    for o in "${MPDEC_OBJS[@]}"; do
        # shellcheck disable=SC2046  # the flags are words
        ${CC:-cc} -O2 -fPIC $(mpdec_machine_cflags) -I"$tmp/cfg" -I"$lib" -c "$lib/$o.c" -o "$tmp/obj/$o.o"
    done
    ar rcs "$tmp/out/lib/libmpdec.a" "$tmp/obj"/*.o
    cp "$lib/mpdecimal.h" "$tmp/out/include/"
    mkdir -p "$(dirname "$d")"
    rm -rf -- "$d"
    mv -T "$tmp/out" "$d"
    note "built libmpdec $MPDEC_VERSION"
}

# shellcheck disable=SC2086  # CC may carry arguments
cc_version() {  # cc_version FLAVOUR: the first line of the compiler's --version
    local cc=${CC:-cc}
    [[ -z ${1:-} ]] || cc=${FLAVOUR_CC[$1]:-$cc}
    $cc --version 2>/dev/null | sed -n 1p || echo "no compiler"
}

# sha256 of the series file and each listed patch's diff: a patch's message
# (its DEP-3 header, its subject's n/N) does not change what is built.
series_key() {  # series_key [SERIES_FILE]
    local p file=${1:-$SERIES_FILE} dir
    dir=$(dirname "$file")
    {
        [[ -f $file ]] && cat "$file"
        while read -r p; do
            if [[ -f $dir/$p ]]; then echo "$p $(sed -n '/^diff --git /,$p' "$dir/$p" | sha256_str)"
            else echo "$p MISSING"; fi
        done < <(series_patches "$file")
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
    elif [[ -n ${FLAVOUR_SERIES[$f]:-} ]]; then
        local p
        printf 'other-series %s %s\n' "${FLAVOUR_SERIES[$f]}" "$(series_key "$PATCHES/${FLAVOUR_SERIES[$f]}")"
        while read -r p; do printf 'patch %s\n' "$p"; done < <(series_patches "$PATCHES/${FLAVOUR_SERIES[$f]}")
    else
        printf 'series none\n'
    fi
    local check
    check=$(check_series_file "$f")
    if [[ -n $check ]]; then   # (only these flavours: the others' keys stay as they were)
        printf 'checking-series %s %s\n' "${check#"$PATCHES"/}" "$(series_key "$check")"
        local c
        while read -r c; do printf 'checking-patch %s\n' "$c"; done < <(series_patches "$check")
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

apply_series() {  # apply_series DIR [SERIES_FILE [LABEL]]
    local dir=$1 file=${2:-$SERIES_FILE} p out rc rejected pdir
    local -a patches
    pdir=$(dirname "$file")
    mapfile -t patches < <(series_patches "$file")
    for p in "${patches[@]}"; do
        [[ -f $pdir/$p ]] || stage_fail "patch $p listed in $file does not exist in $pdir"
    done
    [[ ${#patches[@]} -eq 0 ]] || command -v patch >/dev/null || ensure_packages patch
    for p in "${patches[@]}"; do
        echo "--- applying $p"
        rc=0
        out=$(patch -d "$dir" -p1 --fuzz=0 --no-backup-if-mismatch -f -i "$pdir/$p" 2>&1 </dev/null) || rc=$?
        printf '%s\n' "$out"
        if [[ $rc -ne 0 ]]; then
            rejected=$(printf '%s\n' "$out" | rejected_files | tr '\n' ' ')
            rejected=${rejected% }
            stage_fail "patch $p does not apply cleanly (zero fuzz) to $PY_VERSION${rejected:+; rejected file(s): $rejected}" \
                "  patch file: $pdir/$p; rejects are left in $dir" \
                "  fix: rebase $p onto CPython $PY_VERSION"
        fi
    done
    note "${#patches[@]} ${3-${2:+checking }}patch(es)"
}

stage_patch() {  # stage_patch FLAVOUR
    local f=$1 b=$CACHE/build/$1
    ensure_source_tree
    rm -rf -- "$b/staging"
    mkdir -p "$b"
    echo "copying $SOURCE_TREE -> $b/staging"
    # realpath: a tree that is a symlink would be copied as the link, and
    # the series applied to the tree itself
    cp -a -- "$(realpath -- "$SOURCE_TREE")" "$b/staging"
    rm -f "$b/staging/.brc-merge-unpacked"
    if [[ ${FLAVOUR_PATCHED[$f]} == 1 ]]; then
        apply_series "$b/staging"
    elif [[ -n ${FLAVOUR_SERIES[$f]:-} ]]; then
        [[ -f $PATCHES/${FLAVOUR_SERIES[$f]} ]] || stage_fail "$f needs the series $PATCHES/${FLAVOUR_SERIES[$f]}, which does not exist"
        apply_series "$b/staging" "$PATCHES/${FLAVOUR_SERIES[$f]}" "${FLAVOUR_SERIES[$f]} "
    else
        note "unpatched"
    fi
    local check
    check=$(check_series_file "$f")
    if [[ -n $check ]]; then
        [[ -f $check ]] || stage_fail "$f needs the checking series $check, which does not exist"
        apply_series "$b/staging" "$check"
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
    # PGO trains once per obj dir (CPython's profile-run-stamp has no
    # prerequisites): make would compile a changed tree against the old
    # profile, which gcc refuses (coverage mismatch). An optimised build
    # starts empty whenever its tree changes.
    [[ " ${CONF_FLAGS[*]} " != *" --enable-optimizations "* ]] ||
        key+=$'\n'"tree $(full_key "$f" | sha256sum | cut -c1-16)"
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
    # shellcheck disable=SC2206  # a list of module names
    local -a imports=("${SMOKE_IMPORTS[@]}" ${LINE_SMOKE_IMPORTS[$SERIES_LINE]:-})
    for m in "${imports[@]}"; do
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
    # The flavour's environment for every stage (the build runs its python).
    local -a env_saved=()
    local v
    for v in ${FLAVOUR_ENV[$f]:-}; do
        env_saved+=("$(declare -p "${v%%=*}" 2>/dev/null || echo "unset ${v%%=*}")")
        export "${v?}"
    done
    run_stage patch "$f" "$logs" stage_patch "$f"
    run_stage deps "$f" "$logs" stage_deps "$f"
    [[ $SERIES_LINE != main ]] || run_stage mpdec "$f" "$logs" stage_mpdec "$f"
    key=$(full_key "$f")   # the compiler may only exist now
    run_stage configure "$f" "$logs" stage_configure "$f"
    run_stage make "$f" "$logs" stage_make "$f"
    run_stage install "$f" "$logs" stage_install "$f"
    run_stage smoke "$f" "$logs" stage_smoke "$f" "$STAGED_PREFIX"
    run_stage activate "$f" "$logs" stage_activate "$f" "$key"
    for v in "${env_saved[@]}"; do eval "${v/#declare /declare -g }"; done
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
    local -a patches files checks
    local p c
    mapfile -t patches < <(series_patches)
    for p in "${patches[@]}"; do
        [[ -f $PATCHES/$p ]] || stage_fail "patch $p listed in $SERIES_FILE does not exist in $PATCHES"
    done
    # The checking and comparison series apply to the base too (after the
    # series or alone): the base files they touch are verified like the
    # series' own.
    # (|| true: errexit holds in the subshell, and main has no checking/.)
    mapfile -t checks < <({ compgen -G "$PATCHES/checking/*.series" || true
                            compgen -G "$PATCHES/compare/*.series" || true
                          } | sort)
    for c in "${checks[@]}"; do
        local d=${c%/*}
        while read -r p; do
            [[ -f $d/$p ]] || stage_fail "patch $p listed in $c does not exist in $d"
            patches+=("${d#"$PATCHES"/}/$p")
        done < <(series_patches "$c")
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

# The flavours of FLAVOURS that are of line $1, in the order given.
line_flavours() {  # line_flavours LINE -> LINE_FLAVOURS
    local f
    LINE_FLAVOURS=()
    for f in "${FLAVOURS[@]}"; do
        [[ ${FLAVOUR_LINE[$f]:-$DEFAULT_LINE} != "$1" ]] || LINE_FLAVOURS+=("$f")
    done
}

main() {
    parse_args "$@"
    select_line "${LINES[0]}"
    case $MODE in
        print-config)
            printf '%s=%s\n' BRC_MERGE_SOURCE "$SOURCE" BRC_MERGE_CACHE "$CACHE" \
                BRC_MERGE_DIST "$DIST" BRC_MERGE_PREFIX "$PREFIX" BRC_MERGE_JOBS "$JOBS" BRC_MERGE_PATCHES "$PATCHES" \
                BRC_MERGE_OFFLINE "$OFFLINE" BRC_MERGE_OPTIMIZE "$OPTIMIZE" BRC_MERGE_NO_DEPS "$NO_DEPS" \
                BRC_MERGE_QUIET "$QUIET" BRC_MERGE_LINE "$SERIES_LINE" PY_VERSION "$PY_VERSION"
            [[ -z $COMMIT ]] || printf '%s=%s\n' COMMIT "$COMMIT"
            # what image labels and their test compare with a build's key
            printf '%s=%s\n' SERIES_KEY "$(series_key)"
            return ;;
        update-checksums)
            run_stage source "" "$CACHE/build/logs" stage_source version-only
            run_stage update-checksums "" "$CACHE/build/logs" stage_update_checksums
            [[ $QUIET == 1 ]] || sed 's/^/  /' "$CHECKSUMS_FILE"
            return ;;
        check)
            local f l rc=0
            for l in "${LINES[@]}"; do
                select_line "$l"
                resolve_source
                line_flavours "$l"
                for f in "${LINE_FLAVOURS[@]}"; do
                    if up_to_date "$f" "$(full_key "$f")"; then echo "$f up to date"
                    else echo "$f needs a build"; rc=3; fi
                done
            done
            return $rc ;;
    esac
    local f l
    for l in "${LINES[@]}"; do
        select_line "$l"
        resolve_source
        line_flavours "$l"
        for f in "${LINE_FLAVOURS[@]}"; do build_flavour "$f"; done
    done
}

main "$@"; exit
