#!/usr/bin/env bash
# image/dist-tarball.sh [--dist DIR] [--out DIR] FLAVOUR  (make dist-tarball FLAVOUR=...)
#
# Pack the built dist/FLAVOUR as a relocatable tarball in python-build-standalone's
# install-only layout (python/bin/python3 at the top), which runs from wherever
# it is unpacked with no rewrite step:
#
#   OUT/brc-merge-<version>-<series sha12|stock>-<flavour>-<arch>-linux-gnu.tar.gz
#   OUT/<the same>.tar.gz.sha256          (sha256sum format)
#   OUT/<the same>.uv.json                (uv's downloads list: one entry, a file:// URL)
#   inside: python/BUILD-INFO.json        (image/build-info.py)
#
# uv python install --python-downloads-json-url OUT/<the same>.uv.json <key>
# installs it (key: cpython-<version>[+freethreaded]-linux-<arch>-gnu, printed
# at the end); a moved tarball needs its URL in the list changed to match.
#
# The interpreter already is relocatable: libpython is linked statically (no
# rpath needed, so no patchelf) and getpath finds the prefix from the
# executable at run time. What names the build prefix is fixed in a staged
# copy (dist/FLAVOUR itself is never changed): the shebangs of bin/ scripts
# (pip3, pydoc3, idle3) become a /bin/sh line that execs the python next to
# the script, pkg-config's prefix becomes ${pcfiledir}/../.., build-details.json
# gets relative paths. The copy is trimmed as the image's is (image/slim-prefix.sh:
# no test suites, static libraries, -O byte code or DWARF; tkinter is kept).
# sysconfig's build variables (LIBDIR, CONFIG_ARGS, ...) keep naming the build
# prefix, as python-build-standalone's name theirs.
#
# Only the core flavours of build.sh --list (gil, ft, ft-brc) and main-ft-brc:
# never a checking flavour (debug, sanitizers) or a comparison one (ft-upstream).
# Everything is written under temporary names in OUT and renamed at the end; on
# any failure nothing is left.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIST=${BRC_MERGE_DIST:-$ROOT/dist}
OUT=""

# The flavours, their groups and descriptions: build.sh's table. Shipped: the
# core group and main-ft-brc (stock CPython main alone is not worth shipping).
table=$("$ROOT/build.sh" --list) || { echo "dist-tarball: $ROOT/build.sh --list failed" >&2; exit 1; }
declare -A GROUP=() DESC=()
SHIPPED=()
while IFS=$'\t' read -r name _ group _ desc _; do
    [[ $name != '#'* ]] || continue
    GROUP[$name]=$group DESC[$name]=$desc
    [[ $group != core && $name != main-ft-brc ]] || SHIPPED+=("$name")
done <<<"$table"

usage() {
    sed -n '2,26s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    echo "flavours: ${SHIPPED[*]}; default OUT: DIST/tarballs"
}
die() {  # die RC LINE...: the first line prefixed, the others as they are
    local rc=$1; shift
    printf 'dist-tarball: %s\n' "$1" >&2; shift
    [[ $# -eq 0 ]] || printf '%s\n' "$@" >&2
    exit "$rc"
}

args=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --dist) DIST=${2:?--dist needs a directory}; shift 2 ;;
        --out) OUT=${2:?--out needs a directory}; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) die 2 "unknown option $1 (see --help)" ;;
        *) args+=("$1"); shift ;;
    esac
done
[[ ${#args[@]} -eq 1 && -n ${args[0]} ]] ||
    die 2 "name one flavour: ${SHIPPED[*]} (e.g. make dist-tarball FLAVOUR=ft-brc)"
f=${args[0]}
OUT=${OUT:-$DIST/tarballs}

if [[ " ${SHIPPED[*]} " != *" $f "* ]]; then
    case ${GROUP[$f]:-} in
        checking)
            die 2 "$f is a checking flavour (pydebug/sanitizer build for make refleak/tsan/asan): never shipped" \
                "  pack a release flavour instead: make dist-tarball FLAVOUR=ft-brc (or ft, gil)" ;;
        compare)
            die 2 "$f is stock plus our backport of upstream's fix, for comparison only: never shipped" \
                "  pack ft-brc (make dist-tarball FLAVOUR=ft-brc) or stock ft" ;;
        "") die 2 "unknown flavour '$f'; one of: ${SHIPPED[*]}" ;;
        *) die 2 "$f is not shipped: it is ${DESC[$f]}; these are: ${SHIPPED[*]}" ;;
    esac
fi

install=$DIST/$f
if [[ ! -x $install/bin/python3 ]]; then
    die 1 "$f is not built: $install/bin/python3 does not exist" \
        "  build it first: make $f$([[ $DIST == "$ROOT/dist" ]] || echo " DIST=$DIST") (or ./build.sh $f), then run this again"
fi
install=$(realpath "$install")
key=$install/.brc-merge-key
[[ -f $key ]] || die 1 "$install has no .brc-merge-key: not an install build.sh made; rebuild it with make $f"
[[ $(sed -n 's/^flavour //p' "$key") == "$f" ]] ||
    die 1 "$install/.brc-merge-key is of flavour '$(sed -n 's/^flavour //p' "$key")', not $f; rebuild with make $f"
old=$(sed -n 's/^configure --prefix=\([^ ]*\) .*/\1/p' "$key")
version=$(sed -n 's/^python //p' "$key")
series=$(sed -n 's/^series //p' "$key")
[[ -n $old && -n $version && -n $series ]] || die 1 "$key lacks its configure/python/series lines; rebuild with make $f"
if [[ $series == none ]]; then id=stock; else id=${series:0:12}; fi

# The tools, all in a Debian that built the flavours (build-essential brings
# binutils). As root, a missing one is installed, as build.sh does its deps.
declare -A TOOL_PKG=([tar]=tar [gzip]=gzip [sha256sum]=coreutils [realpath]=coreutils
    [ldd]=libc-bin [dpkg-query]=dpkg [readelf]=binutils [strip]=binutils)
need=()
for t in "${!TOOL_PKG[@]}"; do command -v "$t" >/dev/null || need+=("${TOOL_PKG[$t]}"); done
if [[ ${#need[@]} -gt 0 ]]; then
    mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
    [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null ||
        die 1 "missing tools; install them with: sudo apt-get update && sudo apt-get install -y ${need[*]}"
    echo "dist-tarball: installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# A dist/ build older than the series is packed as what it is (its own series
# checksum names it), with a word.
cache=$("$ROOT/build.sh" --print-config 2>/dev/null | sed -n 's/^BRC_MERGE_CACHE=//p') || cache=""
if [[ -n $cache && $install == "$(realpath -m "$cache/install/$f")" ]]; then
    rc=0; "$ROOT/build.sh" --offline --quiet --check "$f" >/dev/null 2>&1 || rc=$?
    [[ $rc -ne 3 ]] || echo "dist-tarball: note: $f is not up to date with the series (make $f rebuilds it);" \
        "packing the installed build, series $id"
fi

mkdir -p "$OUT"
OUT=$(realpath "$OUT")
stage=$(mktemp -d "$OUT/.dist-tarball.$f.XXXXXX")
tmp_tar="" tmp_sum="" tmp_uv="" final="" done_ok=0
cleanup() {
    rm -rf -- "$stage"
    [[ $done_ok == 0 ]] || return 0
    echo "dist-tarball: failed; removing the partial output" >&2
    rm -f -- ${tmp_tar:+"$tmp_tar"} ${tmp_sum:+"$tmp_sum"} ${tmp_uv:+"$tmp_uv"} ${final:+"$final"}
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "dist-tarball: staging $install"
cp -a "$install/." "$stage/python/"
py=$stage/python/bin/python3
WITH_TK=1 "$ROOT/image/slim-prefix.sh" "$stage/python" | sed 's/^/  /'

# bin/ scripts: "#!$old/bin/python3.14" -> a line sh runs and Python reads as a
# string: exec the interpreter next to the script's real path.
for s in "$stage/python/bin/"*; do
    [[ -f $s && ! -L $s ]] || continue
    first=$(head -c 512 "$s" | head -n 1 | tr -d '\0')
    [[ $first == "#!$old/"* ]] || continue
    exe=${first#"#!$old/bin/"}
    [[ $exe != */* && -x $stage/python/bin/$exe ]] || die 1 "$s: shebang $first names no interpreter in bin/"
    { printf '#!/bin/sh\n'
      # shellcheck disable=SC2016  # $0 and $@ are for the script's own sh
      printf "'''exec' \"\$(dirname -- \"\$(realpath -- \"\$0\")\")/%s\" \"\$0\" \"\$@\"\n' '''\n" "$exe"
      tail -n +2 "$s"; } >"$s.new"
    chmod --reference="$s" "$s.new"
    mv -f "$s.new" "$s"
done
for s in "$stage/python/bin/"*; do
    [[ -f $s && ! -L $s ]] || continue
    if head -n 1 "$s" | grep -qF "$old"; then die 1 "$s still starts with the build prefix $old"; fi
done
sed -i 's|^prefix=.*|prefix=${pcfiledir}/../..|' "$stage/python/lib/pkgconfig/"*.pc
"$py" -I - "$stage/python" <<'EOF'
import glob, json, os, sys
prefix = sys.argv[1]
for path in glob.glob(os.path.join(prefix, "lib", "python3*", "build-details.json")):
    d = json.load(open(path))
    old = d["base_prefix"]
    if not os.path.isabs(old):
        continue
    # as CPython's generate-build-details.py --relative-paths writes it
    d["base_prefix"] = os.path.relpath(old, os.path.dirname(path.replace(prefix, old, 1)))
    lib = d.get("libpython", {})
    for k in ("static", "dynamic", "dynamic_stableabi"):     # gone with the *.a
        if k in lib and not os.path.exists(lib[k].replace(old, prefix, 1)):
            del lib[k]
    if "libpython" in d and not d["libpython"]:
        del d["libpython"]
    for sect, k in (("", "base_interpreter"), ("libpython", "static"), ("libpython", "dynamic"),
                    ("libpython", "dynamic_stableabi"), ("c_api", "headers"), ("c_api", "pkgconfig_path")):
        c = d.get(sect, {}) if sect else d
        if k in c and os.path.isabs(c[k]):
            c[k] = os.path.join(".", os.path.relpath(c[k], old))
    with open(path, "w") as f:
        json.dump(d, f, indent=2)
        f.write("\n")
EOF

# It runs from here, a path it was not built for: prefix found at run time,
# the stdlib's C modules load, a rewritten script starts.
env -i PATH=/usr/bin:/bin "$py" -I -c '
import os, sys, sysconfig, ssl, sqlite3, zlib, ctypes, venv
p = os.path.realpath(sys.argv[1])
assert os.path.realpath(sys.prefix) == p, (sys.prefix, p)
assert sysconfig.get_paths()["include"].startswith(p), sysconfig.get_paths()
' "$stage/python" || die 1 "the staged copy does not run from $stage/python"
env -i PATH=/usr/bin:/bin "$stage/python/bin/pip3" --version >/dev/null ||
    die 1 "the staged bin/pip3 does not start"

multiarch=$("$py" -I -c 'import sysconfig; print(sysconfig.get_config_var("MULTIARCH"))')
[[ $multiarch == *-linux-gnu ]] || die 1 "unexpected MULTIARCH '$multiarch' (expected <arch>-linux-gnu)"
name=brc-merge-$version-$id-$f-$multiarch.tar.gz
"$py" -I "$ROOT/image/build-info.py" "$stage/python" "$name" | sed 's/^/  /'

echo "dist-tarball: packing $name"
tmp_tar=$OUT/.$name.tmp.$$
tmp_sum=$OUT/.$name.sha256.tmp.$$
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner -cf - python | gzip -n -6 >"$tmp_tar"
(cd "$OUT" && printf '%s  %s\n' "$(sha256sum <"$tmp_tar" | cut -d' ' -f1)" "$name") >"$tmp_sum"
uv_json=$OUT/${name%.tar.gz}.uv.json
tmp_uv=$OUT/.${uv_json##*/}.tmp.$$
# uv's schema (its download-metadata.json); variant null is the GIL build.
uv_key=$("$py" -I - "$OUT/$name" "$tmp_sum" "$tmp_uv" "$version" "$multiarch" "$id" <<'EOF'
import json, pathlib, re, sys, sysconfig
tarball, sums, out, version, multiarch, build = sys.argv[1:]
major, minor, patch, pre = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)((?:a|b|rc)\d+)?", version).groups()
arch = multiarch.split("-")[0]
ft = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
key = "cpython-%s%s-linux-%s-gnu" % (version, "+freethreaded" if ft else "", arch)
entry = {"name": "cpython", "arch": {"family": arch, "variant": None}, "os": "linux",
         "libc": "gnu", "major": int(major), "minor": int(minor), "patch": int(patch),
         "prerelease": pre or "", "url": pathlib.Path(tarball).as_uri(),
         "sha256": open(sums).read().split()[0], "variant": "freethreaded" if ft else None,
         "build": "brc-merge-" + build}
with open(out, "w") as f:
    json.dump({key: entry}, f, indent=2)
    f.write("\n")
print(key)
EOF
) || die 1 "could not write the uv downloads list $uv_json"
rm -f -- "$OUT/$name.sha256" "$uv_json"    # a previous run's, for a tarball about to be replaced
final=$OUT/$name
mv -f "$tmp_tar" "$final"; tmp_tar=""
mv -f "$tmp_sum" "$final.sha256"; tmp_sum=""
mv -f "$tmp_uv" "$uv_json"; tmp_uv=""
done_ok=1
echo "dist-tarball: wrote $OUT/$name ($(du -m "$OUT/$name" | cut -f1) MB), $name.sha256 and ${uv_json##*/}"
echo "dist-tarball: uv python install --python-downloads-json-url $uv_json $uv_key"
