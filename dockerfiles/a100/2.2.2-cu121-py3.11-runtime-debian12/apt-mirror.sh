#!/bin/sh
# GENERATED — do not edit; run `imagesmith render`
# Point apt at a mirror. Usage:
#   apt-mirror.sh build URL     rewrite the apt sources to URL for this build step (saves the originals)
#   apt-mirror.sh components C… add archive components (non-free, multiverse) to every entry for this build step
#   apt-mirror.sh restore       put the original sources back (the build-time mirror does not stay in the image)
#   apt-mirror.sh runtime URL   rewrite the apt sources to URL for good (the user's run-time mirror)
# An empty URL changes nothing. Handles /etc/apt/sources.list and DEB822 /etc/apt/sources.list.d/*.sources;
# rewrites the archive host of Debian (…/debian, …/debian-security) and Ubuntu (…/ubuntu) entries.
set -eu
mode="$1"
url="${2:-}"
saved=/tmp/imagesmith-apt-sources
files=""
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && files="$files $f"
done
save() {
    rm -rf "$saved" && mkdir -p "$saved"
    for f in $files; do cp -p "$f" "$saved/$(echo "$f" | tr / _)"; done
}
rewrite() {
    for f in $files; do
        sed -i -E \
            -e "s#https?://[^ ]*/(debian-security|debian|ubuntu)([/ ]|\$)#${url%/}/\\1\\2#g" \
            "$f"
    done
}
case "$mode" in
    build)
        [ -n "$url" ] || exit 0
        save
        rewrite
        ;;
    components)
        shift
        [ -d "$saved" ] || save
        for c in "$@"; do
            for f in $files; do
                sed -i -E \
                    -e "/^deb(-src)?[[:space:]]/{/[[:space:]]${c}([[:space:]]|\$)/!s/[[:space:]]*\$/ ${c}/}" \
                    -e "/^Components:/{/[[:space:]]${c}([[:space:]]|\$)/!s/[[:space:]]*\$/ ${c}/}" \
                    "$f"
            done
        done
        ;;
    restore)
        [ -d "$saved" ] || exit 0
        for f in "$saved"/*; do
            [ -e "$f" ] || continue
            cp -p "$f" "$(basename "$f" | tr _ /)"
        done
        rm -rf "$saved"
        ;;
    runtime)
        [ -n "$url" ] || exit 0
        rewrite
        ;;
    *)
        echo "usage: apt-mirror.sh build URL | components C... | restore | runtime URL" >&2
        exit 2
        ;;
esac
