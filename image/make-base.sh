#!/usr/bin/env bash
# image/make-base.sh [IMAGE]
#
# No container registry is reachable here, so the Dockerfile's base image is
# made locally: `debootstrap --variant=minbase SUITE` from the Debian mirror the
# host's apt already uses (read from /etc/apt/sources.list{,.d/*}; no host is
# hard-coded), slimmed like the official -slim images, then `podman import`ed
# under exactly the name the Dockerfile's FROM uses, so `--pull=never` finds it.
#
#   IMAGE   default debian:bookworm-slim (= docker.io/library/debian:bookworm-slim);
#           a Debian image: the suite is the tag up to the first '-', or $SUITE.
# Skips everything when IMAGE already exists (FORCE=1 rebuilds it). Needs root.
# ENGINE=podman (default) or docker.
set -euo pipefail

IMAGE=${1:-debian:bookworm-slim}
ENGINE=${ENGINE:-podman}
case $IMAGE in   # the fully qualified name, as `FROM debian:...` means it
    debian:*) IMAGE=docker.io/library/$IMAGE ;;
    library/debian:*) IMAGE=docker.io/$IMAGE ;;
    docker.io/library/debian:*) ;;
    *) echo "make-base.sh: $IMAGE is not a Debian image (debian:SUITE[-slim]); it cannot be made here" >&2; exit 2 ;;
esac
tag=${IMAGE##*:}
SUITE=${SUITE:-${tag%%-*}}
[[ $SUITE =~ ^[a-z]+$ ]] || { echo "make-base.sh: cannot tell the Debian suite from '$IMAGE'; set SUITE=" >&2; exit 2; }

if [[ ${FORCE:-0} != 1 ]] && $ENGINE image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "base image $IMAGE exists (FORCE=1 to re-create it)"
    exit 0
fi
[[ $(id -u) -eq 0 ]] || { echo "make-base.sh: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "make-base.sh: debootstrap is missing (apt-get install -y debootstrap)" >&2; exit 1; }

# "URI SUITE" for every enabled deb entry of the host's apt sources, both the
# one-line format (*.list) and deb822 (*.sources).
apt_entries() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f $f ]] || continue
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" && NF >= 3 { print $2, $3 }'
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] || continue
        awk '
            function flush(   i, j, nu, ns, u, s) {
                if (types ~ /(^| )deb( |$)/ && enabled !~ /^(no|false)$/) {
                    nu = split(uris, u, " "); ns = split(suites, s, " ")
                    for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print u[i], s[j]
                }
                types = uris = suites = ""; enabled = "yes"
            }
            BEGIN { enabled = "yes" }
            /^[[:space:]]*#/ { next }
            /^[[:space:]]*$/ { flush(); next }
            { line = $0; key = tolower(line); sub(/:.*/, "", key); sub(/^[^:]*:[[:space:]]*/, "", line) }
            key == "types" { types = line } key == "uris" { uris = line }
            key == "suites" { suites = line } key == "enabled" { enabled = tolower(line) }
            END { flush() }
        ' "$f"
    done
}
mapfile -t entries < <(apt_entries | awk '!seen[$0]++')
mirror_for() { printf '%s\n' "${entries[@]}" | awk -v s="$1" '$2 == s { print $1; exit }'; }
MIRROR=$(mirror_for "$SUITE")
[[ -n $MIRROR ]] || {
    echo "make-base.sh: the host's apt sources have no 'deb' entry for suite $SUITE:" >&2
    printf '    %s\n' "${entries[@]}" >&2
    exit 1
}
echo "suite $SUITE from the host's mirror $MIRROR"

work=$(mktemp -d /var/tmp/brc-merge-base.XXXXXX)
trap 'rm -rf -- "$work"' EXIT
root=$work/rootfs
t0=$SECONDS
debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2
    echo "make-base.sh: debootstrap failed" >&2
    exit 1
}
echo "debootstrap done in $((SECONDS - t0))s"

# apt sources inside: the suite plus -updates and -security where the host has them.
{
    for s in "$SUITE" "$SUITE-updates" "$SUITE-security"; do
        m=$(mirror_for "$s")
        [[ -n $m ]] || continue
        printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n' "$m" "$s"
    done
} >"$root/etc/apt/sources.list.d/debian.sources"
rm -f "$root/etc/apt/sources.list"

# Like the official -slim images: no docs, man pages or locales from later
# installs, no recommends, and no apt caches in the image.
cat >"$root/etc/dpkg/dpkg.cfg.d/slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
CFG
cat >"$root/etc/apt/apt.conf.d/90slim" <<'CFG'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
CFG
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
rm -rf "$root"/usr/share/{man,info,locale}/* "$root"/var/lib/apt/lists/* \
    "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log \
    "$root"/tmp/* "$root"/root/.bash_history
: >"$root/etc/hostname"; : >"$root/etc/resolv.conf"   # supplied by the container engine

import_flags=()
[[ $ENGINE != podman ]] || import_flags=(--quiet)
tar --numeric-owner --xattrs -C "$root" -c . |
    $ENGINE import "${import_flags[@]}" --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' \
        --message "debootstrap --variant=minbase $SUITE $MIRROR (brc-merge image/make-base.sh)" \
        - "$IMAGE" >/dev/null
echo "created $IMAGE ($($ENGINE image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}')) in $((SECONDS - t0))s"
