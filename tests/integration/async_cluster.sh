#!/usr/bin/env bash
# Async mode trains: two workers applying pushes on arrival reach a useful
# accuracy, and the servers apply one update per push (no barrier).
source "$(dirname "$0")/lib.sh"

# Updates of the large chunk on a thread pool (off by default on 2 cores).
"$CLUSTER" --servers 2 --workers 2 --batch 64 --steps 300 --mode async --progress-every 100 \
    --apply-threads 2 \
    --json >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "async cluster failed"; }
line=$(tail -n 1 "$TMP/out")
[ "$(printf '%s' "$line" | sed -n 's/.*"mode":"\([a-z]*\)".*/\1/p')" = async ] ||
    fail "summary does not say async: $line"
acc=$(json_field "$line" test_accuracy)
at_least "$acc" 0.7 || fail "async accuracy $acc after 300 steps is too low"
# 2 workers x 300 steps = 600 pushes, each applied to server 0's single chunk.
grep -q "server 0\] summary: clock [0-9]*, 600 pushes .* 600 chunk updates" "$TMP/err" ||
    fail "server 0 did not apply every push exactly once"
echo "PASS: async training reached accuracy $acc"
