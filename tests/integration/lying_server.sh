#!/usr/bin/env bash
# Workers trust nothing a server sends (issue 18, item 6). A real worker meets
# ps-fake-server, which speaks the protocol until one chosen lie or silence:
# a server that accepts and never answers, one that welcomes and then never
# answers, one that stalls in the middle of a frame, a WELCOME at clock
# 2^64-1 or in mode "bogus", a PULL_REPLY with dtype 99, clock 2^64-1 or NaN
# weights, a PUSH_REPLY saying 2^31-1 chunks were dropped, an ERROR with a
# connection-loss status and escape codes in its reason, and a reply far
# larger than any answer can be, a WAITING for a pull never made, and an
# HTTP server's answer to the HELLO. Each time the worker must exit non-zero, not
# hang and not reconnect, with one line naming the server (index and
# address) and what it did wrong; the silent ones after --request-timeout
# (plus --connect-timeout for a first pull, which may wait for the job to
# join), which their line states, and within a bound timed from the fake
# server's "accepted" line, loose enough for a loaded machine. A worker
# whose first pull brings the weights of the job's last step (no lie: a sync
# job can go on without it) computes and pushes nothing. An
# honest fake server, by contrast, sees a worker that computes for longer than
# its request timeout finish.
# Synchronisation is on the fake server's ready FIFO and the worker's exit.
source "$(dirname "$0")/lib.sh"
FAKE="$BUILD/tests/ps-fake-server"
WORKER="$BUILD/shardps-worker"
REQUEST_TIMEOUT=2
CONNECT_TIMEOUT=3
# Below the 30 s a worker waits for a WELCOME without --request-timeout.
SLACK=20
# A worker that is still running after this was hanging (the old behaviour).
HANG=40
# The fake server of the case under way, stopped however the test ends.
fake=
trap 'if [ -n "$fake" ]; then kill "$fake" 2>/dev/null || true; fi; rm -rf "$TMP"' EXIT

# run_case NAME BOUND WANT: the worker against the fake server's case NAME
# must fail within BOUND seconds of being accepted (0: no bound beyond HANG)
# with one line naming the server that contains WANT.
run_case() {
    local name=$1 bound=$2 want=$3 port line t0 t1 rc worker lines
    # LYING_CASES="silent pull-nan": run only those (to try a case alone).
    [ -z "${LYING_CASES:-}" ] || [[ " $LYING_CASES " == *" $name "* ]] || return 0
    mkfifo "$TMP/$name.ready"
    "$FAKE" --case "$name" --hidden 32 --ready-fd 3 3>"$TMP/$name.ready" 2>"$TMP/$name.fake" </dev/null >/dev/null &
    fake=$!
    exec 4<"$TMP/$name.ready"
    read -r -t 30 port <&4 || fail "$name: the fake server reported no port"
    set +e
    timeout -k 2 "$HANG" "$WORKER" --servers "127.0.0.1:$port" --workers 1 --rank 0 --hidden 32 \
        --batch 32 --steps 3 --no-eval --connect-timeout "$CONNECT_TIMEOUT" \
        --request-timeout "$REQUEST_TIMEOUT" 2>"$TMP/$name.err" &
    worker=$!
    read -r -t "$HANG" line <&4
    t0=$(date +%s.%N)
    wait "$worker"
    rc=$?
    t1=$(date +%s.%N)
    set -e
    kill "$fake" 2>/dev/null || true
    wait "$fake" 2>/dev/null || true
    exec 4<&-
    [ "$line" = "accepted 1" ] || { cat "$TMP/$name.err" >&2; fail "$name: the worker never connected"; }
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "$name: the worker hung (killed after $HANG s)"
    [ "$rc" -ne 0 ] || { cat "$TMP/$name.err" >&2; fail "$name: the worker exited 0"; }
    lines=$(grep -c "server 0 (127.0.0.1:$port)" "$TMP/$name.err" || true)
    [ "$lines" -eq 1 ] || { cat "$TMP/$name.err" >&2; fail "$name: $lines lines name the server, want 1"; }
    grep "server 0 (127.0.0.1:$port)" "$TMP/$name.err" | grep -q -- "$want" ||
        { cat "$TMP/$name.err" >&2; fail "$name: the line naming the server lacks '$want'"; }
    ! grep -q "reconnecting" "$TMP/$name.err" || fail "$name: the worker reconnected to a liar"
    [ "$(grep -c '^accepted' "$TMP/$name.fake")" -eq 1 ] || fail "$name: the worker connected again"
    if [ "$bound" != 0 ]; then
        awk -v a="$t0" -v b="$t1" -v m="$bound" 'BEGIN { exit !(b - a < m) }' ||
            fail "$name: the worker took $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s, want < $bound s"
    fi
    echo "ok: $name (exit $rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s): $(grep "server 0 (127.0.0.1:$port)" "$TMP/$name.err")"
}

# An honest server and a worker that computes for longer than its request
# timeout between requests (--slow-ms): only the time a server owes an answer
# counts, so the worker finishes.
mkfifo "$TMP/honest.ready"
"$FAKE" --case honest --hidden 32 --ready-fd 3 3>"$TMP/honest.ready" 2>"$TMP/honest.fake" </dev/null >/dev/null &
fake=$!
exec 4<"$TMP/honest.ready"
read -r -t 30 port <&4 || fail "honest: the fake server reported no port"
timeout -k 2 "$HANG" "$WORKER" --servers "127.0.0.1:$port" --workers 1 --rank 0 --hidden 32 \
    --batch 32 --steps 2 --no-eval --slow-ms $((REQUEST_TIMEOUT * 1000 + 1000)) \
    --request-timeout "$REQUEST_TIMEOUT" 2>"$TMP/honest.err" ||
    { cat "$TMP/honest.err" >&2; fail "honest: a worker slower than its request timeout failed"; }
kill "$fake" 2>/dev/null || true
wait "$fake" 2>/dev/null || true
exec 4<&-
echo "ok: honest, with --slow-ms past the request timeout: $(grep 'done:' "$TMP/honest.err")"

# Issue 22, cause 5: a server whose handshake slots are all taken closes the
# connection that waited longest with -EAGAIN; a worker comes back within
# its connect timeout instead of quitting (it exited 1, "refused us").
mkfifo "$TMP/full.ready"
"$FAKE" --case full-once --hidden 32 --ready-fd 3 3>"$TMP/full.ready" 2>"$TMP/full.fake" </dev/null >/dev/null &
fake=$!
exec 4<"$TMP/full.ready"
read -r -t 30 port <&4 || fail "full-once: the fake server reported no port"
timeout -k 2 "$HANG" "$WORKER" --servers "127.0.0.1:$port" --workers 1 --rank 0 --hidden 32 \
    --batch 32 --steps 2 --no-eval --connect-timeout "$CONNECT_TIMEOUT" 2>"$TMP/full.err" ||
    { cat "$TMP/full.err" >&2; fail "full-once: a worker told to come back did not"; }
kill "$fake" 2>/dev/null || true
wait "$fake" 2>/dev/null || true
exec 4<&-
[ "$(grep -c '^accepted' "$TMP/full.fake")" -eq 2 ] || fail "full-once: the worker did not come back once"
echo "ok: full-once, told to come back: came back and trained"

# A sync server that went on without this worker before its first pull (a
# quorum does not wait) answers it with the weights of the job's last step:
# the worker has nothing left to compute. It once computed "step 0" on them
# and pushed a step past the job's end, which real servers applied.
mkfifo "$TMP/ahead.ready"
"$FAKE" --case pull-ahead --hidden 32 --ready-fd 3 3>"$TMP/ahead.ready" 2>"$TMP/ahead.fake" </dev/null >/dev/null &
fake=$!
exec 4<"$TMP/ahead.ready"
read -r -t 30 port <&4 || fail "pull-ahead: the fake server reported no port"
timeout -k 2 "$HANG" "$WORKER" --servers "127.0.0.1:$port" --workers 1 --rank 0 --hidden 32 \
    --batch 32 --steps 3 --no-eval 2>"$TMP/ahead.err" ||
    { cat "$TMP/ahead.err" >&2; fail "pull-ahead: the worker failed on weights of its last step"; }
kill "$fake" 2>/dev/null || true
wait "$fake" 2>/dev/null || true
exec 4<&-
! grep -q "^push at clock" "$TMP/ahead.fake" ||
    { cat "$TMP/ahead.err" >&2; fail "pull-ahead: a step past the job's end was pushed: $(grep "^push at clock" "$TMP/ahead.fake" | head -n 1)"; }
grep -q "done: 0 steps" "$TMP/ahead.err" || { cat "$TMP/ahead.err" >&2; fail "pull-ahead: the worker computed steps"; }
echo "ok: pull-ahead, weights of the last step at the first pull: nothing computed or pushed"

silent="request timeout $REQUEST_TIMEOUT.0 s, --request-timeout"
run_case silent $((REQUEST_TIMEOUT + SLACK)) "sent nothing for .* while we waited for its WELCOME ($silent"
run_case silent-after-welcome $((REQUEST_TIMEOUT + CONNECT_TIMEOUT + SLACK)) \
    "sent nothing for .* while we waited for the answer to a pull ($silent"
run_case stall-mid-frame $((REQUEST_TIMEOUT + CONNECT_TIMEOUT + SLACK)) \
    "sent nothing for .* while we waited for the answer to a pull ($silent"
run_case welcome-clock 0 "WELCOME at clock 18446744073709551615, past the 3 steps"
run_case welcome-mode 0 "WELCOME with mode 'bogus'"
# Issue 22, cause 7: a worker that declares the tensors checks the WELCOME's
# table (by its digest, since the table travels in a TABLE frame of its own).
run_case welcome-no-table 0 "sent a WELCOME without the digest of the tensor table it holds"
run_case welcome-table-other 0 "another tensor table than we declared (its digest differs)"

run_case pull-dtype 0 "PULL_REPLY with dtype 99"
run_case pull-clock 0 "sent weights of clock 18446744073709551615 for a pull of step 0"
run_case pull-nan 0 "weights that are not all finite"
run_case push-status 0 "says it dropped 2147483647 chunks of a push of 1"
run_case error-reset 0 "refused us: all is well?\[2J?worker 0: done"
run_case oversized-reply 0 "sent a malformed frame (frame exceeds size limit"
run_case waiting-stranger 0 "says a pull we are not waiting for is held (request"
# Another program at the port: said at its first answer, never retried.
run_case http 0 'is not a shardps server: it answered like an HTTP server ("HTTP/1.1 400 Bad Request")'
echo "PASS: every lying or silent server made the worker give up on it, naming it"
