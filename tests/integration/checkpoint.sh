#!/usr/bin/env bash
# Durability with real processes and files:
# 1. a run stopped at step 50 and resumed with --restore ends with the same
#    weights as an uninterrupted 100-step run (to 1e-6);
# 2. with server 0's newest checkpoint corrupted, it refuses the file by name
#    and falls back to the previous one while server 1 takes its newest: the
#    servers re-synchronise and training completes; with --restore-clock 40
#    every server takes clock 40 and the result matches the whole run again;
#    servers restored from a checkpoint hold its tensors and refuse workers
#    of another model, naming the first tensor that differs;
# 3. a server SIGKILLed mid-run is restarted with --restore; training
#    finishes and both servers end at exactly the planned number of steps.
source "$(dirname "$0")/lib.sh"

# Updates on a thread pool, so checkpoints must wait for the ones in flight
# (every chunk: the default model's are below the size the pool takes).
opts=(--servers 2 --workers 2 --batch 32 --mode sync --optimizer adam --lr-schedule constant
    --progress-every 10 --apply-threads 2 --apply-pool-min-bytes 0)
run() { # name args...
    local name=$1
    shift
    "$CLUSTER" "${opts[@]}" --json "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" ||
        { cat "$TMP/$name.err" >&2; fail "cluster run $name failed"; }
}

run whole --steps 100 --dump-weights "$TMP/whole.bin"

run first --steps 50 --checkpoint-dir "$TMP/ck" --checkpoint-every 20
ls "$TMP/ck"/server-0-clock-000000000050.ckpt "$TMP/ck"/server-0-clock-000000000040.ckpt \
    >/dev/null || fail "expected checkpoints at clocks 40 and 50"
cp -r "$TMP/ck" "$TMP/ck2"
# A restored server holds the checkpoint's tensors: workers of another model
# are refused, the first differing tensor named.
if "$CLUSTER" "${opts[@]}" --hidden 64 --steps 100 --checkpoint-dir "$TMP/ck" --restore \
    >"$TMP/other.out" 2>"$TMP/other.err"; then
    fail "workers of another model trained on a restored checkpoint"
fi
grep -q "\[server [01]\] restored clock 50 from" "$TMP/other.err" ||
    { cat "$TMP/other.err" >&2; fail "the servers did not restore their tensors from the checkpoint"; }
grep -q "model mismatch: tensor fc1.weight: 64x784 from the worker, 256x784 on this server" \
    "$TMP/other.err" || { cat "$TMP/other.err" >&2; fail "workers of another model not refused"; }
run resumed --steps 100 --checkpoint-dir "$TMP/ck" --restore --dump-weights "$TMP/resumed.bin"
grep -q "restored clock 50 from" "$TMP/resumed.err" || fail "the resumed run did not restore 50"
"$WDIFF" "$TMP/resumed.bin" "$TMP/whole.bin" 1e-6 || fail "resumed run differs from whole run"

# Flip one byte in the middle of server 0's newest checkpoint.
f="$TMP/ck2/server-0-clock-000000000050.ckpt"
printf '\xff' | dd of="$f" bs=1 seek=$(($(stat -c %s "$f") / 2)) conv=notrunc status=none
run fallback --steps 100 --checkpoint-dir "$TMP/ck2" --restore
grep -q "server-0-clock-000000000050.ckpt: checksum mismatch" "$TMP/fallback.err" ||
    fail "the corrupt checkpoint was not refused by name"
grep -q "\[server 0\] restored clock 40 from" "$TMP/fallback.err" ||
    fail "server 0 did not fall back to clock 40"
[ "$(grep -c "\] summary: clock 100," "$TMP/fallback.err")" -eq 2 ] ||
    fail "after the fallback both servers should end at clock 100"
run aligned --steps 100 --checkpoint-dir "$TMP/ck2" --restore --restore-clock 40 \
    --dump-weights "$TMP/aligned.bin"
"$WDIFF" "$TMP/aligned.bin" "$TMP/whole.bin" 1e-6 || fail "run restored at clock 40 differs"

run killed --steps 150 --checkpoint-dir "$TMP/ck3" --checkpoint-every 1 --kill-server 0@60
grep -q "killing server 0 at step" "$TMP/killed.err" || fail "server 0 was never killed"
grep -q "\[server 0\] restored clock [0-9]* from" "$TMP/killed.err" || fail "server 0 did not restore"
[ "$(grep -c "\] summary: clock 150," "$TMP/killed.err")" -eq 2 ] ||
    fail "both servers should end at clock 150: $(grep "summary:" "$TMP/killed.err")"
echo "PASS: resume == whole run, corrupt checkpoint refused, killed server restored"
