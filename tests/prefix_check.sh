#!/usr/bin/env bash
# make prefix-check: every prefix of a line's series (its first patch, its
# first two, ...) builds and passes test_free_threading.test_gc, so that the
# series can be bisected and taken one patch at a time.
#
#   tests/prefix_check.sh [LINE...]      default: 3.14 main
#
# One patched flavour per line, built by build.sh in a cache of its own
# ($CACHE/prefix/LINE: each prefix rebuilds incrementally), from the source
# tree the main cache already holds (make ft-brc / make main-ft-brc first).
# Not in CI: a few minutes a prefix.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache=${BRC_MERGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/brc-merge}
[[ $# -gt 0 ]] || set -- 3.14 main
failed=0

for line in "$@"; do
    pdir=patches/$line
    [[ -f $pdir/series ]] || { echo "prefix_check: no line $line ($pdir/series)" >&2; exit 2; }
    # shellcheck disable=SC1090,SC1091
    tree_name=$(source "$pdir/base"; if [[ -n ${COMMIT:-} ]]; then echo "cpython-$COMMIT"; else echo "Python-$PY_VERSION"; fi)
    flavour=$([[ $line == 3.14 ]] && echo ft-brc || echo "$line-ft-brc")
    tree=$(find "$cache/sources" -maxdepth 1 -type d -name "$tree_name*" 2>/dev/null | sort | head -n 1)
    if [[ -z $tree ]]; then
        echo "prefix_check: no $tree_name source tree in $cache/sources; run 'make $flavour' first" >&2
        exit 2
    fi
    mapfile -t series < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$pdir/series" | grep -v '^$')
    work=$cache/prefix/$line
    for ((k = 1; k <= ${#series[@]}; k++)); do
        p=$work/patches
        rm -rf -- "$p"
        mkdir -p "$p"
        cp "$pdir/base" "$pdir/checksums" "$p/"
        for name in "${series[@]:0:k}"; do cp "$pdir/$name" "$p/"; done
        printf '%s\n' "${series[@]:0:k}" >"$p/series"
        label="$line prefix $k/${#series[@]} (${series[k-1]:0:40})"
        if ! ./build.sh --quiet --offline --no-deps --cache "$work/cache" --dist "$work/dist" \
                --source "$tree" --patches "$p" "$flavour" >"$work/build-$k.log" 2>&1; then
            echo "FAIL $label: build (log: $work/build-$k.log)"
            failed=1
            continue
        fi
        if timeout 900 "$work/dist/$flavour/bin/python3" -m test test_free_threading.test_gc \
                >"$work/test-$k.log" 2>&1; then
            echo "ok   $label: $(grep -o 'Total tests: .*' "$work/test-$k.log")"
        else
            echo "FAIL $label: test_gc (log: $work/test-$k.log)"
            failed=1
        fi
    done
done
exit "$failed"
