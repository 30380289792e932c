#!/bin/sh
# The version is meson.build's (the wheel takes it from there, and --version says it);
# debian/changelog and the man pages' headers repeat it and must agree with it.
# usage: check-versions.sh SOURCE_DIR
set -eu
source=$1
version=$(sed -n "s/^  version: '\(.*\)',\$/\1/p" "$source/meson.build")
[ -n "$version" ] || { echo "check-versions: no version in meson.build" >&2; exit 1; }
status=0
changelog=$(sed -n '1s/^ddp-launch (\([^)]*\)).*/\1/p' "$source/debian/changelog")
if [ "$changelog" != "$version" ]; then
    echo "check-versions: debian/changelog is at $changelog, meson.build at $version" >&2
    status=1
fi
for page in "$source"/man/*.[0-9]; do
    grep -q "^\.TH .* \"ddp-launch $version\" " "$page" || {
        echo "check-versions: $(basename "$page")'s .TH line does not say ddp-launch $version" >&2
        status=1
    }
done
[ $status -ne 0 ] || echo "version $version everywhere"
exit $status
