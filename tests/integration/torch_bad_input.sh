#!/usr/bin/env bash
# shardps.torch given bad input (issue 23, point 9; tests/python/
# torch_bad_input.py), each one clear exception and the job going on: a
# table over the limits (4,097 tensors, a 256-byte name) before anything is
# sent; a missing server within the connect timeout, naming it; rank 1
# models differing from rank 0's by count, name and shape, each refused with
# the first difference named, and a rank 1 started twice, after which ranks
# 0 and 1 train to the same weights; rank 1 started first with another
# model gives way to rank 0's table (the job's is rank 0's whatever the
# order), naming both ranks; and the table at its limits: 4,096 tensors
# named with 255 bytes train 10 steps.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

PY=(env LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 "$PYTHON")
SCRIPT="$PY_TESTS/torch_bad_input.py"

start_server() { # name workers: one server; its port in $port
    mkfifo "$TMP/port.$1"
    "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index 0 --num-servers 1 \
        --workers "$2" --optimizer sgd --lr 0.01 --lr-schedule constant \
        3>"$TMP/port.$1" 2>"$TMP/server.$1.err" &
    read -r port <"$TMP/port.$1"
}

run() { # name args...: torch_bad_input.py, failing with its output
    local name=$1
    shift
    "${PY[@]}" "$SCRIPT" "$@" >"$TMP/$name.out" 2>&1 ||
        { cat "$TMP/$name.out" >&2; fail "$name failed"; }
    grep -E "^(raised|PASS)" "$TMP/$name.out"
}

run limits limits
# A port that is bound but not listening: connections to it are refused.
mkfifo "$TMP/hold"
"$PYTHON" -c "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0))
print(s.getsockname()[1], flush=True); sys.stdin.read()" <"$TMP/hold" >"$TMP/closed.port" &
exec 4>"$TMP/hold"
wait_for_line "$TMP/closed.port" "^[0-9]" 30 || fail "no port bound"
run missing missing "127.0.0.1:$(cat "$TMP/closed.port")"
exec 4>&-
echo "PASS: a table over the limits and a missing server raise one clear exception each"

start_server job 2
job_server=$!
run job job "127.0.0.1:$port" "$TMP/server.job.err"
wait $job_server || { cat "$TMP/server.job.err" >&2; fail "the job's server failed"; }

start_server order 2
order_server=$!
run order order "127.0.0.1:$port" "$TMP/server.order.err"
wait $order_server || { cat "$TMP/server.order.err" >&2; fail "the order job's server failed"; }

start_server big 1
big_server=$!
run big big "127.0.0.1:$port"
wait $big_server || { cat "$TMP/server.big.err" >&2; fail "the big table's server failed"; }
