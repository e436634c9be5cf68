#!/usr/bin/env bash
# A job held by a missing worker says so, on both sides (issue 21):
# 1. before training starts: the server names the ranks that have not joined
#    every few seconds, the present worker says what its server waits for,
#    and its timeout names the missing workers instead of blaming the server;
# 2. mid-run, in sync mode: a worker stopped in its step (SIGSTOP) holds the
#    step; the server names it as the rank whose push is missing, and the
#    other worker says the same of its server.
source "$(dirname "$0")/lib.sh"
SERVER="$BUILD/shardps-server"
WORKER="$BUILD/shardps-worker"

# start_server NAME ARGS...: a server on an OS-chosen port; sets $port and
# $server. Background processes run without a timeout(1) wrapper, so that
# the pid is theirs: the traps kill them, and SIGSTOP reaches them.
start_server() {
    local name=$1
    shift
    mkfifo "$TMP/$name.ready"
    "$SERVER" --listen 127.0.0.1:0 --ready-fd 3 "$@" 3>"$TMP/$name.ready" 2>"$TMP/$name.err" &
    server=$!
    read -r -t 60 port <"$TMP/$name.ready" ||
        { cat "$TMP/$name.err" >&2; fail "$name reported no port"; }
}

# 1. Rank 1 of 2 never comes. Worker 0's first pull may wait for the whole
# job to join: its request timeout plus its connect timeout (4 + 16 s). The
# server explains a pull held 5 s, so the worker hears why well before it
# gives up.
start_server s1 --workers 2
trap 'kill -9 $server 2>/dev/null || true; rm -rf "$TMP"' EXIT
set +e
timeout -k 2 120 "$WORKER" --servers "127.0.0.1:$port" --workers 2 --rank 0 --hidden 16 \
    --batch 16 --steps 5 --no-eval --connect-timeout 16 --request-timeout 4 2>"$TMP/w.err"
rc=$?
set -e
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] ||
    { cat "$TMP/w.err" >&2; fail "the lone worker exited with $rc"; }
grep -q "\[server 0\] waiting for rank 1 of 2 to join (1 worker held, the longest for [0-9]* s)" \
    "$TMP/s1.err" || { cat "$TMP/s1.err" >&2; fail "the server did not name the missing rank"; }
grep -q "waiting for server 0 (127.0.0.1:$port): waiting for rank 1 of 2 to join ([0-9]* s so far)" \
    "$TMP/w.err" || { cat "$TMP/w.err" >&2; fail "the worker did not say what its server waits for"; }
grep -q "gave up after [0-9.]* s waiting for the answer to a pull from server 0 (127.0.0.1:$port), which is waiting for other workers: waiting for rank 1 of 2 to join" \
    "$TMP/w.err" || { cat "$TMP/w.err" >&2; fail "the worker's timeout does not name the missing rank"; }
! grep -q "sent nothing for" "$TMP/w.err" ||
    { cat "$TMP/w.err" >&2; fail "the worker's timeout blames the server"; }
[ "$(grep -c "ERROR" "$TMP/w.err")" -eq 1 ] ||
    { cat "$TMP/w.err" >&2; fail "the worker's failure took more than one line"; }
echo "ok: $(grep "gave up" "$TMP/w.err" | cut -d' ' -f4- | cut -c1-160)..."
kill "$server" 2>/dev/null || true
wait "$server" 2>/dev/null || true

# 2. Sync, both ranks present; rank 1 is stopped once both train. The
# heartbeat timeout (60 s) keeps it in the job while the test looks, so the
# step waits for its push: whichever step it was stopped in, worker 0 soon
# waits for rank 1's push of one.
start_server s2 --workers 2 --heartbeat-timeout 60
for r in 0 1; do
    "$WORKER" --servers "127.0.0.1:$port" --workers 2 --rank $r --hidden 16 --batch 16 \
        --epochs 100 --no-eval --progress-every 1 2>"$TMP/w$r.err" &
    eval "w$r=\$!"
done
trap 'kill -9 $server $w0 $w1 2>/dev/null || true; rm -rf "$TMP"' EXIT
wait_for_line "$TMP/w1.err" "epoch 1/100" 60 || { cat "$TMP/w1.err" >&2; fail "rank 1 never trained"; }
kill -STOP "$w1"
wait_for_line "$TMP/s2.err" "\[server 0\] step [0-9]+ is waiting for rank 1 of 2 to push it" 30 ||
    { cat "$TMP/s2.err" >&2; fail "the server did not name the rank whose push is missing"; }
wait_for_line "$TMP/w0.err" \
    "waiting for server 0 \(127.0.0.1:$port\): step [0-9]+ is waiting for rank 1 of 2 to push it" 30 ||
    { cat "$TMP/w0.err" >&2; fail "worker 0 did not say what its server waits for"; }
echo "ok: $(grep -m1 "is waiting for rank 1 of 2 to push it" "$TMP/s2.err" | cut -d' ' -f4-)"
kill -9 "$w0" "$w1" "$server" 2>/dev/null || true
echo "PASS: a job held by a missing worker names it on the server and on the waiting worker"
