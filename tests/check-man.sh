#!/bin/sh
# Every option ddp-launch --help lists is documented in ddp-launch(1).
#   check-man.sh DDP_LAUNCH MAN_PAGE
set -eu
launcher=$1 page=$2
flags=$("$launcher" --help | grep -oE '^ +(-[a-zA-Z], )?--[a-z][a-z-]*' | grep -oE -- '--[a-z-]+' | sort -u)
[ -n "$flags" ] || { echo "check-man: $launcher --help lists no options" >&2; exit 1; }
missing=0
for flag in $flags; do
    # The page writes each dash as \-; the name must end there (--store-max-key is
    # not documented by --store-max-keys).
    escaped=$(printf '%s' "$flag" | sed 's/-/\\\\-/g')
    if ! grep -qE -- "$escaped(\$|[^a-z\\])" "$page"; then
        echo "check-man: $flag is in --help but not in $page" >&2
        missing=1
    fi
done
[ "$missing" = 0 ] && echo "check-man: $(echo "$flags" | wc -l) options, all in $(basename "$page")"
exit "$missing"
