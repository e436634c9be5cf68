#!/usr/bin/env bash
# Async mode trains: two workers applying pushes on arrival reach a useful
# accuracy, and the servers apply one update per push (no barrier), on the
# server's loop and on its thread pool alike.
source "$(dirname "$0")/lib.sh"

# check_exactly_once ERR STEPS: 2 workers x STEPS push each of server 0's
# chunks 2·STEPS times, one frame per chunk, and every one is applied once.
check_exactly_once() {
    local chunks n
    chunks=$(sed -n 's/.*server 0 of 2 holds \([0-9]*\) chunks.*/\1/p' "$1")
    [ -n "$chunks" ] || fail "server 0 did not say how many chunks it holds"
    n=$((2 * $2 * chunks))
    grep -q "server 0\] summary: clock [0-9]*, $n pushes .* $n chunk updates" "$1" ||
        fail "server 0 did not apply every push exactly once ($chunks chunks, $2 steps)"
}

"$CLUSTER" --servers 2 --workers 2 --batch 64 --steps 300 --mode async --progress-every 100 \
    --json >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "async cluster failed"; }
line=$(tail -n 1 "$TMP/out")
[ "$(printf '%s' "$line" | sed -n 's/.*"mode":"\([a-z]*\)".*/\1/p')" = async ] ||
    fail "summary does not say async: $line"
acc=$(json_field "$line" test_accuracy)
at_least "$acc" 0.7 || fail "async accuracy $acc after 300 steps is too low"
check_exactly_once "$TMP/err" 300

# Updates on a thread pool (off by default on 2 cores; the default model's
# chunks are below the size from which they go there, so every chunk is sent).
"$CLUSTER" --servers 2 --workers 2 --batch 64 --steps 30 --mode async --progress-every 10 \
    --apply-threads 2 --apply-pool-min-bytes 0 >"$TMP/wide.out" 2>"$TMP/wide.err" ||
    { cat "$TMP/wide.err" >&2; fail "async cluster with pool updates failed"; }
check_exactly_once "$TMP/wide.err" 30
echo "PASS: async training reached accuracy $acc; every push applied once, on the loop and on the pool"
