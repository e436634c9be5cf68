#!/usr/bin/env bash
# Strangers against a server without --auth-token-file (issue 22), with real
# processes: ps-hostile-client plays the stranger, shardps-worker the job.
# 1. A stranger's HELLO declaring the one-tensor table x[1] as a free rank,
#    then gone. The server must not keep that declaration: SIGTERM right
#    after writes no checkpoint (nothing was applied), a restart with
#    --restore auto after a second such attempt starts fresh, and the real
#    workers, arriving after the stranger left, train and finish (they were
#    refused "model mismatch" for good: the table was adopted, checkpointed
#    at clock 0 and restored).
# 2. A HELLO of about 100 bytes declaring 4 GiB (just under the default
#    --max-model-bytes) while the server must go on answering: another
#    peer's slowest round trip under 50 ms, the server's RSS under 64 MiB
#    with the declaration held (ps-hostile-client huge-table measures both).
# 3. 40 idle connections to a server with --auth-token-file and
#    --max-connections 20, then two workers holding the token: they train
#    (they were refused "this server takes at most 20 connections" and
#    exited 1 within 0.3 s despite --connect-timeout 20).
# Synchronisation is on the servers' ready FIFOs and log lines, and on exits.
source "$(dirname "$0")/lib.sh"
HOSTILE="$BUILD/tests/ps-hostile-client"
SERVER="$BUILD/shardps-server"
WORKER="$BUILD/shardps-worker"
job=(--mode sync --optimizer sgd --lr 0.05)
server=
idle=
trap 'kill $server $idle 2>/dev/null || true; rm -rf "$TMP"' EXIT

# start_server NAME ARGS...: a server of 2 workers on an ephemeral port;
# sets server (its pid) and port, logging to $TMP/NAME.err.
start_server() {
    local name=$1
    shift
    mkfifo "$TMP/$name.port"
    "$SERVER" --listen 127.0.0.1:0 --workers 2 "${job[@]}" "$@" --ready-fd 3 \
        3>"$TMP/$name.port" 2>"$TMP/$name.err" &
    server=$!
    read -r -t 30 port <"$TMP/$name.port" || { cat "$TMP/$name.err" >&2; fail "$name: no port"; }
}

# stranger NAME: x[1] declared as rank 1, then gone; waits until the server
# has seen it leave.
stranger() {
    "$HOSTILE" --server "127.0.0.1:$port" --workers 2 --rank 1 stranger-table >"$TMP/$1.out" 2>&1 ||
        { cat "$TMP/$1.out" >&2; fail "$1: the stranger was not welcomed"; }
    wait_for_line "$TMP/$1.err" "worker 1 \(.*\) left at clock 0" 30 ||
        { cat "$TMP/$1.err" >&2; fail "$1: the server did not see the stranger leave"; }
}

checkpoints() {
    find "$TMP/ck" -name '*.ckpt' 2>/dev/null | wc -l
}

# 1. The stranger's table, then SIGTERM: nothing to keep, nothing written.
start_server first --checkpoint-dir "$TMP/ck" --restore auto
grep -q "without --auth-token-file anyone who can reach" "$TMP/first.err" ||
    { cat "$TMP/first.err" >&2; fail "the server did not say what a stranger can do"; }
stranger first
kill -TERM "$server"
wait "$server" || { cat "$TMP/first.err" >&2; fail "the first server did not exit 0"; }
server=
[ "$(checkpoints)" -eq 0 ] ||
    { ls -l "$TMP/ck" >&2; fail "a checkpoint was written with no step applied (clock 0)"; }
grep -q "no checkpoint (.*): no step has been applied" "$TMP/first.err" ||
    { cat "$TMP/first.err" >&2; fail "the server did not say why it wrote no checkpoint"; }

# Restarted with --restore auto, the stranger first again, then the job.
start_server second --checkpoint-dir "$TMP/ck" --restore auto
stranger second
for r in 0 1; do
    "$WORKER" --servers "127.0.0.1:$port" --workers 2 --rank "$r" --hidden 32 "${job[@]}" \
        --batch 32 --steps 20 --no-eval 2>"$TMP/w$r.err" &
    eval "w$r=\$!"
done
wait "$w0" || { cat "$TMP/w0.err" "$TMP/second.err" >&2; fail "worker 0 failed after the stranger"; }
wait "$w1" || { cat "$TMP/w1.err" "$TMP/second.err" >&2; fail "worker 1 failed after the stranger"; }
wait "$server" || { cat "$TMP/second.err" >&2; fail "the second server did not exit 0"; }
server=
grep -q "summary: clock 20," "$TMP/second.err" ||
    { cat "$TMP/second.err" >&2; fail "the job did not train its 20 steps"; }
echo "ok: a stranger's declaration left with it: no checkpoint at clock 0, and after a restart" \
    "with --restore auto the real workers trained 20 steps"

# 2. 4 GiB declared in one HELLO, held while the server is measured.
start_server huge
"$HOSTILE" --server "127.0.0.1:$port" --workers 2 --rank 1 --server-pid "$server" --timeout 60 \
    huge-table >"$TMP/huge.out" 2>&1 || { cat "$TMP/huge.out" "$TMP/huge.err" >&2; fail "huge-table"; }
wait_for_line "$TMP/huge.err" "tensor table of 1 tensors is withdrawn" 30 ||
    { cat "$TMP/huge.err" >&2; fail "the 4 GiB declaration outlived its declarer"; }
kill -TERM "$server"
wait "$server" || { cat "$TMP/huge.err" >&2; fail "the third server did not exit 0"; }
server=
echo "ok: $(sed -n 's/^PASS huge-table [^ ]* //p' "$TMP/huge.out")"

# 3. Idle strangers in every slot, then the workers with the token.
printf 'correct horse battery staple\n' >"$TMP/token"
chmod 600 "$TMP/token"
start_server slots --auth-token-file "$TMP/token" --max-connections 20
mkfifo "$TMP/hold"
"$HOSTILE" --server "127.0.0.1:$port" --workers 2 --idle 40 idle-slots <"$TMP/hold" \
    >"$TMP/idle.out" 2>&1 &
idle=$!
exec 9>"$TMP/hold"
wait_for_line "$TMP/idle.out" "^HELD" 30 || { cat "$TMP/idle.out" >&2; fail "the idle peers did not connect"; }
for r in 0 1; do
    "$WORKER" --servers "127.0.0.1:$port" --workers 2 --rank "$r" --hidden 32 "${job[@]}" \
        --auth-token-file "$TMP/token" --batch 32 --steps 10 --no-eval --connect-timeout 20 \
        2>"$TMP/s$r.err" &
    eval "w$r=\$!"
done
wait "$w0" || { cat "$TMP/s0.err" "$TMP/slots.err" >&2; fail "worker 0 was kept out by idle strangers"; }
wait "$w1" || { cat "$TMP/s1.err" "$TMP/slots.err" >&2; fail "worker 1 was kept out by idle strangers"; }
exec 9>&-
wait "$idle" || true
wait "$server" || { cat "$TMP/slots.err" >&2; fail "the fourth server did not exit 0"; }
server=
grep -q "summary: clock 10," "$TMP/slots.err" ||
    { cat "$TMP/slots.err" >&2; fail "the job beside the idle strangers did not train its 10 steps"; }
echo "ok: $(head -n 1 "$TMP/idle.out"); both workers with the token trained 10 steps beside them"
echo "PASS: strangers took nothing with a declaration, nor stalled or filled the server with one," \
    "nor kept workers out"

