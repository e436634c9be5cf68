#!/usr/bin/env bash
# A worker stopped with SIGSTOP misses its heartbeats and leaves the barrier;
# the others carry on (the launcher resumes it only once another worker is 40
# steps further, which cannot happen while the barrier waits for it). Resumed
# with SIGCONT, it finds its connections closed, rejoins at the current clock
# and finishes.
# The heartbeat timeout is also how long a worker may go without a word to
# the servers while it computes: its final evaluation takes over half a
# second under a sanitizer on a loaded machine, and must stay well inside it.
source "$(dirname "$0")/lib.sh"

"$CLUSTER" --servers 2 --workers 2 --batch 32 --steps 300 --mode sync --progress-every 10 \
    --heartbeat-timeout 5 --pause-worker 1@40:40 --json >"$TMP/out" 2>"$TMP/err" ||
    { cat "$TMP/err" >&2; fail "the cluster did not finish after a worker was paused"; }

grep -q "pausing worker 1 at step" "$TMP/err" || fail "worker 1 was never paused"
grep -q "worker 1 (.*) silent for .* (heartbeat timeout" "$TMP/err" ||
    fail "no server timed worker 1 out"
grep -q "resuming it with SIGCONT" "$TMP/err" || fail "worker 1 was never resumed"
grep -q "\[worker 1\] rejoined at step" "$TMP/err" || fail "worker 1 did not rejoin"
grep -q "\[worker 1\] done:" "$TMP/err" || fail "worker 1 did not finish"
grep -q "worker 0 (.*) left at clock 300 (finished)" "$TMP/err" || fail "worker 0 did not finish"
echo "PASS: paused worker timed out, the others went on, and it rejoined and finished"
