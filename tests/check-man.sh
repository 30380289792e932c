#!/bin/sh
# The options ddp-launch --help lists (generated from the flag table) and those that
# ddp-launch(1) documents in its OPTIONS section are the same, both ways.
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
# The other way: each item of OPTIONS (the line after .TP) names a flag --help lists.
documented=$(awk '/^\.SH OPTIONS/ { on = 1; next } /^\.SH/ { on = 0 } on && prev == ".TP" { print } { prev = $0 }' "$page" |
    sed 's/\\-/-/g' | grep -oE -- '--[a-z][a-z-]*' | sort -u)
[ -n "$documented" ] || { echo "check-man: no options found in $page's OPTIONS" >&2; exit 1; }
for flag in $documented; do
    if ! printf '%s\n' "$flags" | grep -qx -- "$flag"; then
        echo "check-man: $flag is in $page but not in --help" >&2
        missing=1
    fi
done
[ "$missing" = 0 ] && echo "check-man: $(echo "$flags" | wc -l) options, the same in --help and $(basename "$page")"
exit "$missing"
