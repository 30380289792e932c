#!/bin/sh
# A warm restart (--warm-restarts) with an installed ddp-launch, which must find its
# zygote (ddp_launch/_zygote.py) where it was installed.
#   warm-restart.sh DIR ZYGOTE_DIR COMMAND...
# COMMAND... runs the installed launcher (an env wrapper may come first); the job runs in
# DIR, 2 workers of --preload=json. Once its stderr says the zygote is ready, rank 1 of
# attempt 0 is let fail; attempt 1 must be forked from the zygote, whose script is under
# ZYGOTE_DIR. Every wait is bounded.
set -eu
dir=$1 zygote_dir=$2
shift 2
cat >"$dir/warm.py" <<'PY'
import os, sys, time
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "1":
    for _ in range(6000):
        if os.path.exists(sys.argv[1]):
            sys.exit(3)
        time.sleep(0.01)
print("rank", os.environ["RANK"], "attempt", os.environ["TORCHELASTIC_RESTART_COUNT"])
PY
rm -f "$dir/warm.go"
"$@" --nproc-per-node=2 --max-restarts=1 --warm-restarts --preload=json \
    "$dir/warm.py" "$dir/warm.go" >"$dir/warm.out" 2>"$dir/warm.err" &
job=$!
i=0
until grep -q "has imported json" "$dir/warm.err" || [ $i -ge 600 ]; do
    sleep 0.1
    i=$((i + 1))
done
fail() {
    echo "warm-restart.sh: $1" >&2
    cat "$dir/warm.err" >&2
    exit 1
}
zygote=$(sed -n 's/.*the zygote (pid \([0-9]*\)) has imported.*/\1/p' "$dir/warm.err")
script=$(tr '\0' ' ' <"/proc/${zygote:-0}/cmdline" 2>/dev/null || true)
touch "$dir/warm.go"
case "$script" in
*" $zygote_dir/ddp_launch/_zygote.py "*) ;;
*) kill "$job" 2>/dev/null; fail "the zygote (pid ${zygote:-none}) runs '$script'" ;;
esac
status=0
wait "$job" || status=$?
[ "$status" = 0 ] || fail "the job ended $status"
grep -q "2 of 2 workers of attempt 1 forked from the zygote" "$dir/warm.err" ||
    fail "attempt 1 was not forked from the zygote"
[ "$(grep -c '^rank [01] attempt 1$' "$dir/warm.out")" = 2 ] || fail "no attempt 1 from both ranks"
echo "warm restart (zygote under $zygote_dir): ok"
