#!/usr/bin/env bash
# After --restore the workers start at the checkpoint's clock, not at 0; the
# throughput of the first progress interval must still count only the steps
# this run made (it once subtracted the restored clock from a count that
# starts at 0 and printed ~1e22 samples/s).
source "$(dirname "$0")/lib.sh"

opts=(--servers 1 --workers 2 --batch 32 --mode sync --progress-every 5)
"$CLUSTER" "${opts[@]}" --steps 20 --checkpoint-dir "$TMP/ck" --checkpoint-every 20 \
    >"$TMP/first.out" 2>"$TMP/first.err" || { cat "$TMP/first.err" >&2; fail "first run failed"; }
"$CLUSTER" "${opts[@]}" --steps 30 --checkpoint-dir "$TMP/ck" --restore \
    >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "resumed run failed"; }
grep -q "restored clock 20 from" "$TMP/err" || fail "the resumed run did not restore clock 20"
rates=$(sed -n 's/.*  \([0-9.e+]*\) samples\/s  ETA .*/\1/p' "$TMP/out")
[ -n "$rates" ] || { cat "$TMP/out" >&2; fail "no progress line after the restore"; }
for r in $rates; do
    # Two workers of batch 32 on this machine: far below a billion samples/s.
    awk -v r="$r" 'BEGIN { exit !(r + 0 > 0 && r + 0 < 1e9) }' ||
        { cat "$TMP/out" >&2; fail "a progress line after the restore reads $r samples/s"; }
done
echo "PASS: throughput after --restore counts this run's steps ($(echo $rates | tr '\n' ' ')samples/s)"
