#!/usr/bin/env bash
# Checks that build the series in other shapes than build.sh's flavours, in
# a cache of their own ($CACHE/series-check/...), from the source tree the
# main cache already holds (make ft-brc / make main-ft-brc first).  Not in
# CI: minutes per build.
#
#   tests/series_check.sh prefix [LINE...]       (make prefix-check)
#       [BRC_MERGE_PREFIX_FROM=K: from the K-th prefix on]
#       every prefix of a line's series (its first patch, its first two,
#       ...) builds and passes test_free_threading.test_gc, so that the
#       series can be bisected and taken a patch at a time; default: both
#       lines.
#   tests/series_check.sh hazards [SWITCH...]    (make hazards-check)
#       the 3.14 series plus tests/stress/hazards.patch, which puts back a
#       known hazard per BRC_MERGE_HAZARD switch: the hazard mix
#       (tests/stress/mix.py, default length) must fail in each of 5 seeded
#       runs with the switch, and pass without one; default: every switch.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache=${BRC_MERGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/brc-merge}
SEEDS=${BRC_MERGE_CHECK_SEEDS:-"101 202 303 404 505"}

# build LINE WORK PATCH... : the line's patched flavour with these patches
# (files of patches/LINE, or paths) in this order; prints its python.
build() {
    local line=$1 work=$2; shift 2
    local pdir=patches/$line p=$work/patches flavour tree_name tree name
    flavour=$([[ $line == 3.14 ]] && echo ft-brc || echo "$line-ft-brc")
    # shellcheck disable=SC1090,SC1091
    tree_name=$(source "$pdir/base"; if [[ -n ${COMMIT:-} ]]; then echo "cpython-$COMMIT"; else echo "Python-$PY_VERSION"; fi)
    tree=$(find "$cache/sources" -maxdepth 1 -type d -name "$tree_name*" 2>/dev/null | sort | head -n 1)
    if [[ -z $tree ]]; then
        echo "series_check: no $tree_name source tree in $cache/sources; run 'make $flavour' first" >&2
        exit 2
    fi
    if [[ $line != 3.14 ]]; then
        # the main line builds libmpdec from the 3.14 tree of its cache
        local t314
        t314=$(find "$cache/sources" -maxdepth 1 -type d -name "Python-3.14*" | sort | head -n 1)
        if [[ -n $t314 && ! -d $work/cache/sources/${t314##*/} ]]; then
            mkdir -p "$work/cache/sources"
            cp -a -- "$t314" "$work/cache/sources/"
        fi
    fi
    rm -rf -- "$p"
    mkdir -p "$p"
    cp "$pdir/base" "$pdir/checksums" "$p/"
    : >"$p/series"
    for name in "$@"; do
        [[ -f $name ]] || name=$pdir/$name
        cp "$name" "$p/"
        basename "$name" >>"$p/series"
    done
    ./build.sh --quiet --offline --no-deps --cache "$work/cache" --dist "$work/dist" \
        --source "$tree" --patches "$p" "$flavour" >"$work/build.log" 2>&1 || return 1
    echo "$work/dist/$flavour/bin/python3"
}

series_of() {
    sed -e 's/#.*//' -e 's/[[:space:]]*$//' "patches/$1/series" | grep -v '^$'
}

prefix() {
    local failed=0 line k python work
    [[ $# -gt 0 ]] || set -- 3.14 main
    for line in "$@"; do
        [[ -f patches/$line/series ]] || { echo "series_check: no line $line" >&2; exit 2; }
        mapfile -t series < <(series_of "$line")
        work=$cache/series-check/prefix-$line
        # BRC_MERGE_PREFIX_FROM=K: start at the K-th prefix (the earlier
        # ones passed before, unchanged)
        for ((k = ${BRC_MERGE_PREFIX_FROM:-1}; k <= ${#series[@]}; k++)); do
            local label="$line prefix $k/${#series[@]} (${series[k-1]:0:40})"
            if ! python=$(build "$line" "$work" "${series[@]:0:k}"); then
                echo "FAIL $label: build ($work/build.log)"
                cp "$work/build.log" "$work/build-$k.log"
                failed=1
                continue
            fi
            if timeout 900 "$python" -m test test_free_threading.test_gc >"$work/test-$k.log" 2>&1; then
                echo "ok   $label: $(grep -o 'Total tests: .*' "$work/test-$k.log")"
            else
                echo "FAIL $label: test_gc ($work/test-$k.log)"
                failed=1
            fi
        done
    done
    return "$failed"
}

hazards() {
    local failed=0 work=$cache/series-check/hazards python switch seed found
    [[ $# -gt 0 ]] || set -- nest-guard no-bound no-hand-on no-twin-check
    mapfile -t series < <(series_of 3.14)
    python=$(build 3.14 "$work" "${series[@]}" tests/stress/hazards.patch) ||
        { echo "FAIL build ($work/build.log)"; return 1; }
    for switch in none "$@"; do
        found=0
        for seed in $SEEDS; do
            local log=$work/mix-$switch-$seed.json
            if [[ $switch == none ]]; then
                env -u BRC_MERGE_HAZARD "$python" tests/stress/mix.py --seed "$seed" --json --expect-prompt >"$log" 2>"$log.err" || true
            else
                BRC_MERGE_HAZARD=$switch "$python" tests/stress/mix.py --seed "$seed" --json --expect-prompt >"$log" 2>"$log.err" || true
            fi
            "$python" - "$log" "$switch" "$seed" <<'PY' || found=$((found + 1))
import json, sys
log, switch, seed = sys.argv[1:]
try:
    r = json.loads(open(log).read().strip().splitlines()[-1])
except (IndexError, ValueError):
    print("  %-10s seed %s: no result" % (switch, seed))
    sys.exit(1)
t, first = 0.0, None
for run in r["runs"]:
    t += run["seconds"]
    if not run["ok"] and first is None:
        first = (run["kind"], run["threshold"], round(t), run["failures"][:1])
print("  %-10s seed %s: %s" % (switch, seed, "passed" if first is None else
      "found in part %s (threshold %s), %d s in: %s" % first))
sys.exit(1 if first else 0)
PY
        done
        n=$(wc -w <<<"$SEEDS")
        if [[ $switch == none ]]; then
            echo "without a switch: $((n - found)) of $n seeded runs passed"
            [[ $found -eq 0 ]] || failed=1
        else
            echo "$switch: found in $found of $n seeded runs"
            [[ $found -eq $n ]] || failed=1
        fi
    done
    return "$failed"
}

case ${1:-} in
    prefix|hazards) cmd=$1; shift; "$cmd" "$@" ;;
    *) echo "usage: tests/series_check.sh prefix [LINE...] | hazards [SWITCH...]" >&2; exit 2 ;;
esac
