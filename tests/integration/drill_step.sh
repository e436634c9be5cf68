#!/usr/bin/env bash
# Fault drills fire at the step they name, not at the next progress report:
# with --progress-every far beyond the run, --kill-worker 1@20 kills worker 1
# when it reports step 20 and --kill-server 0@15 kills server 0 when worker 0
# reports step 15 (the launcher asks those workers to report those steps).
source "$(dirname "$0")/lib.sh"

"$CLUSTER" --servers 2 --workers 3 --batch 32 --steps 60 --mode sync --progress-every 1000 \
    --kill-worker 1@20 --kill-server 0@15 --checkpoint-dir "$TMP/ck" --checkpoint-every 5 \
    >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "the cluster did not finish"; }
grep -q "killing worker 1 at step 20 " "$TMP/err" ||
    { grep "killing" "$TMP/err" >&2; fail "worker 1 was not killed at step 20"; }
grep -q "killing server 0 at step 15 " "$TMP/err" ||
    { grep "killing" "$TMP/err" >&2; fail "server 0 was not killed at step 15"; }
grep -q "worker 0 (.*) left at clock 60 (finished)" "$TMP/err" || fail "worker 0 did not finish"
echo "PASS: both drills fired at the steps they named"
