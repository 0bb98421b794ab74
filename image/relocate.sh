#!/usr/bin/env bash
# image/relocate.sh NEW_PREFIX: make an ft-brc install that build.sh made for
# another prefix (PREBUILT=1: the host's $CACHE/install/ft-brc, copied to
# NEW_PREFIX) consistent with where it now lives.
#
# The interpreter itself is relocatable (it finds its stdlib relative to the
# executable); what has the old prefix baked in is text: script shebangs
# (bin/pip*), sysconfig data, python-config, pkg-config and the config Makefile.
# The old prefix is read from the install's .brc-merge-key (configure --prefix=);
# that file itself is left as the record of the host build.
set -euo pipefail
new=${1:?usage: relocate.sh NEW_PREFIX}
cd "$new"
old=$(sed -n 's/^configure --prefix=\([^ ]*\) .*/\1/p' .brc-merge-key)
[[ -n $old ]] || { echo "relocate.sh: no 'configure --prefix=' in $new/.brc-merge-key" >&2; exit 1; }
if [[ $old == "$new" ]]; then echo "already at $new"; exit 0; fi

mapfile -d '' files < <(grep -rlIZF --exclude=.brc-merge-key -e "$old" . || true)
for f in "${files[@]}"; do
    sed -i "s|$old|$new|g" "$f"
done
# The byte code of the changed modules (the sysconfig data) is stale now.
for f in "${files[@]}"; do
    if [[ $f == *.py ]]; then printf '%s\n' "$new/${f#./}"; fi
done | xargs -r "$new/bin/python3" -m compileall -q -f -o 0 -o 1 -o 2 -i - >/dev/null
if left=$(grep -rlIF --exclude=.brc-merge-key -e "$old" .); then
    echo "relocate.sh: still mentioning $old:" >&2; echo "$left" >&2; exit 1
fi
echo "relocated $old -> $new (${#files[@]} text files)"
