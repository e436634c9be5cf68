#!/usr/bin/env bash
# The job options reach every process, and processes that disagree on them
# are refused with each difference named.
# 1. shardps-cluster hands the servers every option of the job table: adamw
#    with --weight-decay trains differently from adam, and --lr-schedule step
#    with --lr-step-size differently from constant (the launcher used to
#    drop both, training bit-identically). The same job twice is
#    bit-identical, so a difference is the option's doing.
# 2. A worker reaching two servers that run different --mode values is
#    refused by the one that differs, the message naming the setting and both
#    values. Servers take the tensors from the first worker's HELLO: a
#    second worker whose --hidden differs is refused with the first tensor
#    that differs and both shapes named.
source "$(dirname "$0")/lib.sh"
SERVER="$BUILD/shardps-server"
WORKER="$BUILD/shardps-worker"

# run NAME ARGS...: a one-server, one-worker job of 12 steps; weights in NAME.bin.
run() {
    local name=$1
    shift
    "$CLUSTER" --servers 1 --workers 1 --hidden 32 --steps 12 --batch 32 --seed 3 \
        --dump-weights "$TMP/$name.bin" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" ||
        { cat "$TMP/$name.err" >&2; fail "shardps-cluster $* failed"; }
}
# differ A B: the two dumps are not the same weights.
differ() {
    if "$WDIFF" "$TMP/$1.bin" "$TMP/$2.bin" 1e-7 >/dev/null; then
        fail "$1 and $2 trained the same weights: an option did not reach the servers"
    fi
    echo "ok: $1 and $2 differ"
}

run adam --optimizer adam --lr 0.01
run adam_again --optimizer adam --lr 0.01
"$WDIFF" "$TMP/adam.bin" "$TMP/adam_again.bin" 0 || fail "the same job twice trained different weights"
run adamw --optimizer adamw --lr 0.01 --weight-decay 0.1
differ adamw adam
run constant --lr-schedule constant --lr 0.01
run step --lr-schedule step --lr-step-size 4 --lr-gamma 0.1 --lr 0.01
differ step constant

# A server: start_server NAME ARGS... sets port_NAME (port 0, ready pipe).
servers=()
start_server() {
    local name=$1 port
    shift
    mkfifo "$TMP/$name.ready"
    timeout --foreground -k 5 120 "$SERVER" --listen 127.0.0.1:0 --ready-fd 3 "$@" \
        3>"$TMP/$name.ready" 2>"$TMP/$name.err" &
    servers+=($!)
    read -r -t 60 port <"$TMP/$name.ready" || { cat "$TMP/$name.err" >&2; fail "$name reported no port"; }
    eval "port_$name=$port"
}
trap 'kill "${servers[@]}" 2>/dev/null || true; rm -rf "$TMP"' EXIT

# expect_refused NAME WANT ARGS...: the worker exits non-zero at the
# handshake (not after its 600 s connect timeout; stopped at 60 s, time
# enough for a sanitizer build to start on a loaded machine) and its log
# contains WANT.
expect_refused() {
    local name=$1 want=$2 rc
    shift 2
    set +e
    timeout -k 2 60 "$WORKER" --hidden "${HIDDEN:-32}" --rank "${RANK:-0}" --steps 1 --no-eval --connect-timeout 600 "$@" \
        >/dev/null 2>"$TMP/$name.err"
    rc=$?
    set -e
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "$name: the worker hung"
    [ "$rc" -ne 0 ] || fail "$name: the worker was not refused"
    grep -q -- "$want" "$TMP/$name.err" || { cat "$TMP/$name.err" >&2; fail "$name: no '$want'"; }
    echo "ok: $name: $(grep -o -- "job settings differ.*" "$TMP/$name.err" | head -n 1)"
}

start_server s0 --server-index 0 --num-servers 2 --mode sync
start_server s1 --server-index 1 --num-servers 2 --mode async --optimizer sgd
expect_refused modes "mode: sync on the worker, async on this server" \
    --servers "127.0.0.1:$port_s0,127.0.0.1:$port_s1"
grep -q "optimizer: adam on the worker, sgd on this server" "$TMP/modes.err" ||
    fail "the refusal did not name every differing setting"

start_server s2 --workers 2
# It waits for a rank 1 that is refused: its connect timeout must outlast
# the test, or it leaves before the second worker is checked against it.
"$WORKER" --hidden 32 --workers 2 --rank 0 --steps 1 --no-eval --connect-timeout 600 \
    --servers "127.0.0.1:$port_s2" 2>"$TMP/first.err" &
servers+=($!)
wait_for_line "$TMP/s2.err" "worker 0 .* joined" 60 || fail "the first worker never joined"
grep -q "tensor table of 4 tensors (.*) declared by worker 0" "$TMP/s2.err" ||
    fail "the server did not adopt the first worker's tensors"
RANK=1 HIDDEN=64 expect_refused tensors \
    "model mismatch: tensor fc1.weight: 64x784 from the worker, 32x784 on this server" \
    --workers 2 --servers "127.0.0.1:$port_s2"
echo "PASS: job options reach every process; disagreeing processes are refused, each difference named"
