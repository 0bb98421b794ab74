#!/usr/bin/env bash
# image/slim-prefix.sh PREFIX: trim an installed ft-brc prefix for the runtime
# image, then list the Debian packages it needs at run time.
#
#   - removes the test suites (test/, tests/, idle_test/ dirs), static libraries
#     (*.a: libpython3.14t.a alone is ~80 MB) and the -O/-OO bytecode
#     (*.opt-1.pyc, *.opt-2.pyc); the plain .pyc files are kept (startup time);
#   - WITH_TK=0 (default): removes tkinter, idlelib, turtledemo and _tkinter,
#     which would pull Tcl/Tk and X11 into a headless training image;
#   - strips DWARF debug info (strip --strip-debug) but keeps the symbol tables,
#     so perf & co. still name functions; frame pointers are in the code itself
#     (build.sh compiles with -fno-omit-frame-pointer);
#   - makes bin/python3.14 a symlink to python3.14t (they were hard links);
#   - writes PREFIX/share/brc-merge/runtime-packages: the Debian packages owning
#     every shared library that an ELF file in PREFIX links against (ldd), which
#     the runtime stage installs.
# Runs in the builder stage (Debian, with binutils and dpkg).
set -euo pipefail
prefix=${1:?usage: slim-prefix.sh PREFIX}
WITH_TK=${WITH_TK:-0}
cd "$prefix"
before=$(du -sm . | cut -f1)

find . -depth -type d \( -name test -o -name tests -o -name idle_test \) -exec rm -rf -- {} +
# python.o goes with libpython3.14t.a (both only serve to link a new interpreter).
find . -type f \( -name '*.a' -o -name python.o -o -name '*.opt-1.pyc' -o -name '*.opt-2.pyc' \) -delete
if [[ $WITH_TK != 1 ]]; then
    rm -rf -- lib/python3*/tkinter lib/python3*/idlelib lib/python3*/turtledemo \
        lib/python3*/lib-dynload/_tkinter.* bin/idle3*
fi

# ELF files by their first 4 bytes, read by bash itself (a few thousand files:
# a process per file took 13 s).
is_elf() { local m=""; LC_ALL=C IFS= read -r -n 4 m <"$1" || true; [[ $m == $'\x7fELF' ]]; }
elves=()
while IFS= read -r -d '' f; do
    if is_elf "$f"; then elves+=("$f"); fi
done < <(find . -type f -print0 | LC_ALL=C sort -z)
strip --strip-debug "${elves[@]}"

if [[ -f bin/python3.14t && -f bin/python3.14 && ! -L bin/python3.14 ]]; then
    ln -sf python3.14t bin/python3.14
fi

# Debian packages of the libraries the ELF files need (ldd resolves the
# transitive closure). dpkg knows files by their unmerged path (/lib/... or
# /usr/lib/...), hence the leading-* glob.
# "pkg:arch, pkg2:arch: /path" -> pkg, pkg2
mkdir -p share/brc-merge
{ ldd "${elves[@]}" 2>/dev/null || true; } | awk -v p="$prefix/" '
    /=>/ && $(NF-1) ~ /^\// { so = $(NF-1); if (index(so, p) == 1) next
                               sub(/^\/(usr\/)?/, "", so); print "*" so }' | sort -u |
    xargs -r dpkg-query --search | sed 's/: \/.*//' | tr ',' '\n' | sed 's/^ *//; s/:.*//' |
    sort -u >share/brc-merge/runtime-packages
if missing=$({ ldd "${elves[@]}" 2>/dev/null || true; } | grep 'not found'); then
    echo "slim-prefix.sh: unresolved libraries:" >&2; echo "$missing" >&2; exit 1
fi
echo "slimmed $prefix: ${before} MB -> $(du -sm . | cut -f1) MB; ${#elves[@]} ELF files need:" \
    "$(tr '\n' ' ' <share/brc-merge/runtime-packages)"
