#!/usr/bin/env bash
# The debian:RELEASE base images, made here instead of pulled (no Docker Hub on the CI machines): for each
# RELEASE, debootstrap --variant=minbase (rootfs tarball cached), docker import, pushed to the plain local
# registry under the name imagesmith's registry-mirror map gives docker.io/library/debian:RELEASE
# ("docker.io" = "127.0.0.1:5000/hub"). Idempotent: a release already in the registry is skipped.
# scripts/setup.sh runs it for bookworm (and `--debian RELEASE` for more); run it alone for another release:
#
# usage: scripts/debian-base.sh RELEASE...     (as root; e.g. scripts/debian-base.sh trixie)
set -euo pipefail

CACHE="${IMAGESMITH_SETUP_CACHE:-/var/cache/imagesmith-ci}"
MIRROR_PREFIX=127.0.0.1:5000/hub

log() { printf '[debian-base] %s\n' "$*" >&2; }

if [[ $# -eq 0 ]]; then
    echo "usage: $0 RELEASE... (a Debian release debootstrap knows: bookworm, trixie, …)" >&2
    exit 2
fi
for release in "$@"; do
    if [[ ! $release =~ ^[a-z]+$ || ! -e /usr/share/debootstrap/scripts/$release ]]; then
        echo "$0: '$release' is not a release this debootstrap knows (/usr/share/debootstrap/scripts)" >&2
        exit 2
    fi
done
if [[ $(id -u) -ne 0 ]]; then
    echo "$0 must run as root (debootstrap)" >&2
    exit 1
fi

for release in "$@"; do
    ref="$MIRROR_PREFIX/library/debian:$release"
    if curl -sf -o /dev/null -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        "http://127.0.0.1:5000/v2/hub/library/debian/manifests/$release"; then
        log "base $ref already in the local registry"
        continue
    fi
    mkdir -p "$CACHE"
    rootfs="$CACHE/debian-$release-minbase.tar"
    if [[ ! -s $rootfs ]]; then
        log "debootstrap --variant=minbase $release (once; cached in $rootfs)"
        tmp="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
        if ! debootstrap --variant=minbase "$release" "$tmp/root" >"$CACHE/debootstrap-$release.log" 2>&1; then
            tail -n 20 "$CACHE/debootstrap-$release.log" >&2
            rm -rf "$tmp"
            exit 1
        fi
        # like the official image: no downloaded .debs, no apt lists
        rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
        tar --numeric-owner -C "$tmp/root" -cf "$rootfs.part" .
        mv "$rootfs.part" "$rootfs"
        rm -rf "$tmp"
    fi
    log "docker import → $ref, push to the plain registry"
    /usr/bin/docker import --change 'CMD ["bash"]' "$rootfs" "$ref" >/dev/null
    /usr/bin/docker push -q "$ref" >/dev/null
done
