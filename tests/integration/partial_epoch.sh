#!/usr/bin/env bash
# A run cut short by --steps inside an epoch evaluates at its last step and
# says so: "step 10 (epoch 1, 1%)", never "epoch 1 done" for an epoch that was
# not done. A run of exactly one epoch still reports "epoch 1 done".
source "$(dirname "$0")/lib.sh"

"$CLUSTER" --servers 1 --workers 1 --batch 64 --steps 10 --progress-every 5 \
    >"$TMP/out" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "the cluster failed"; }
if grep -q "epoch 1 done" "$TMP/out"; then
    cat "$TMP/out" >&2
    fail "10 of 937 steps reported as a finished epoch"
fi
grep -q "^step 10 (epoch 1, 1%): test accuracy" "$TMP/out" ||
    { cat "$TMP/out" >&2; fail "no evaluation line for step 10"; }
# 60000 / (2 x 500) = 60 steps: exactly one epoch.
"$CLUSTER" --servers 1 --workers 2 --batch 500 --epochs 1 --progress-every 100 \
    >"$TMP/out1" 2>"$TMP/err1" || { cat "$TMP/err1" >&2; fail "the one-epoch run failed"; }
grep -q "^epoch 1 done: test accuracy" "$TMP/out1" ||
    { cat "$TMP/out1" >&2; fail "a whole epoch was not reported as done"; }
echo "PASS: a partial epoch is reported by its step, a whole one as done"
