#!/usr/bin/env bash
# A worker killed with SIGKILL mid-run in sync mode leaves the barrier; the
# remaining workers finish every step and the job reports an accuracy.
source "$(dirname "$0")/lib.sh"

"$CLUSTER" --servers 2 --workers 3 --batch 32 --steps 300 --mode sync --progress-every 10 \
    --kill-worker 1@50 --json >"$TMP/out" 2>"$TMP/err" ||
    { cat "$TMP/err" >&2; fail "the cluster did not finish after a worker was killed"; }

grep -q "killing worker 1 at step" "$TMP/err" || fail "worker 1 was never killed"
grep -q "worker 1 (.*) left at clock [0-9]* (" "$TMP/err" ||
    fail "no server logged worker 1 leaving"
grep -q "worker 0 (.*) left at clock 300 (finished)" "$TMP/err" ||
    fail "worker 0 did not finish all 300 steps"
acc=$(json_field "$(tail -n 1 "$TMP/out")" test_accuracy)
at_least "$acc" 0.6 || fail "accuracy $acc after 300 steps is too low"
echo "PASS: killed worker left the barrier, the others finished (accuracy $acc)"
