#!/usr/bin/env bash
# shardps.torch.ServedEmbedding (issue 24 point 6): a model's EmbeddingBag
# served by a row table trains on one real server (sync, sgd) as the same
# model does in PyTorch alone, rows and dense weights within 1e-6
# (tests/python/torch_rows.py); an attach with accumulate=2 is refused.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

mkfifo "$TMP/port"
"$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --num-servers 1 --workers 1 \
    --mode sync --optimizer sgd --momentum 0 --lr 0.1 --lr-schedule constant --chunk-bytes 4096 \
    3>"$TMP/port" 2>"$TMP/server.err" &
server=$!
read -r -t 30 port <"$TMP/port" || fail "the server did not report its port"
LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 \
    "$PYTHON" "$PY_TESTS/torch_rows.py" "127.0.0.1:$port" 5 >"$TMP/out" 2>&1 ||
    { cat "$TMP/out" "$TMP/server.err" >&2; fail "torch_rows.py failed"; }
cat "$TMP/out"
wait "$server" || { cat "$TMP/server.err" >&2; fail "the server did not exit 0"; }
echo "PASS: a served EmbeddingBag trains as PyTorch alone"
