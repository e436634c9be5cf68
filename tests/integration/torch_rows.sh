#!/usr/bin/env bash
# shardps.torch.ServedEmbedding (issue 24 point 6): a model's EmbeddingBag
# served by a row table trains on one real server (sync, sgd) as the same
# model does in PyTorch alone, rows and dense weights within 1e-6
# (tests/python/torch_rows.py); an attach with accumulate=2 is refused.
# A table used twice in one forward (tests/python/torch_rows_tied.py) trains
# as one nn.Embedding used twice does, with 1 worker and with 2 (against the
# global batch; a use left out of the loss, a step where one rank does not
# use the table), within 2e-6; a use after the step's push and a backward
# into an earlier step are refused; each ID's row is pulled once per step.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

n_started=0
start_server() { # workers: a sync sgd server, its port in $port, its pid in $server
    n_started=$((n_started + 1))
    mkfifo "$TMP/port.$n_started"
    "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --num-servers 1 --workers "$1" \
        --mode sync --optimizer sgd --momentum 0 --lr 0.1 --lr-schedule constant \
        --chunk-bytes 4096 3>"$TMP/port.$n_started" 2>"$TMP/server.$n_started.err" &
    server=$!
    read -r -t 30 port <"$TMP/port.$n_started" || fail "the server did not report its port"
}
py() { # out script args...
    local out=$1
    shift
    LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 \
        "$PYTHON" "$PY_TESTS/$@" >"$out" 2>&1 || { cat "$out" >&2; fail "$1 failed"; }
    cat "$out"
}

start_server 1
py "$TMP/out" torch_rows.py "127.0.0.1:$port" 5
wait "$server" || { cat "$TMP/server.1.err" >&2; fail "the server did not exit 0"; }
echo "PASS: a served EmbeddingBag trains as PyTorch alone"

start_server 1
py "$TMP/tied" torch_rows_tied.py "127.0.0.1:$port" 0 1 5
wait "$server" || { cat "$TMP/server.2.err" >&2; fail "the server did not exit 0"; }
want=$(sed -n 's/^rows pulled: //p' "$TMP/tied")
grep -q "summary of 1 row table: [0-9]* rows pulls ($want rows)" "$TMP/server.2.err" ||
    { grep summary "$TMP/server.2.err" >&2; fail "the server did not send each row once per step ($want)"; }
start_server 2
py "$TMP/tied.1" torch_rows_tied.py "127.0.0.1:$port" 1 2 5 &
rank1=$!
py "$TMP/tied.0" torch_rows_tied.py "127.0.0.1:$port" 0 2 5
wait "$rank1" || fail "rank 1 of 2 failed"
wait "$server" || { cat "$TMP/server.3.err" >&2; fail "the server did not exit 0"; }
echo "PASS: a table used twice in a forward trains as a tied nn.Embedding, with 1 and 2 workers"
