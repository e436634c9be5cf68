#!/usr/bin/env bash
# The Python package (python/shardps, NumPy) on libshardps against real
# servers: it loads a build folder only when SHARDPS_LIB names it; alone,
# with the server given as one "HOST:PORT" string, every weight after a push
# is w - lr * g bit for bit, a list in a string is split at its commas and a
# servers argument of another type is a TypeError; beside
# a shardps-worker in one sync job, its last pull equals the C worker's
# --dump-weights byte for byte, and so does a Python client that declares
# nothing and joins the C worker's tensors (it may reach the servers first,
# and then waits for the declaration). A joiner of servers that hold no
# tensors gives up within its connect timeout, saying why. Every array is
# checked against the table (size, dtype, layout, count) before the library
# writes a byte (tests/python/numpy_job.py arrays).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

start_server() { # name index count args...
    mkfifo "$TMP/port.$1"
    "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index "$2" --num-servers "$3" \
        "${@:4}" 3>"$TMP/port.$1" 2>"$TMP/server.$1.err" &
    read -r port <"$TMP/port.$1"
}

# Without SHARDPS_LIB, the source tree's package loads the installed or the
# system's libshardps, never a build folder of the tree nobody named.
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
out=$(cd "$TMP" && env -u SHARDPS_LIB LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 "$PYTHON" -c '
import shardps
try:
    print(shardps.library_path())
except shardps.ShardpsError as e:
    print("not loaded:", e)') || fail "loading without SHARDPS_LIB crashed"
case "$out" in
"$SRC"/*) fail "without SHARDPS_LIB the package loaded the tree's $out" ;;
esac
echo "PASS: without SHARDPS_LIB no build folder is loaded ($out)"

start_server a 0 1 --workers 1 --optimizer sgd --momentum 0 --lr 0.1 \
    --lr-schedule constant --chunk-bytes 4096
run_python alone "$TMP/alone.out" "127.0.0.1:$port" 32,16 0.1
wait $! || fail "the lone server failed"

# Arrays of the wrong size, dtype, layout or count are refused naming the
# tensor before anything is written; a copied push is free at once.
start_server arrays 0 1 --workers 1 --optimizer sgd --momentum 0 --lr 0.1 --lr-schedule constant
run_python arrays "$TMP/arrays.out" "127.0.0.1:$port"
wait $! || fail "the arrays' server failed"
echo "PASS: arrays are checked against the table; a short one is refused and left as it was"

shared() { # name python-mode (share or join)
    local steps=20 args=(--workers 2 --optimizer sgd --lr 0.05 --chunk-bytes 65536)
    start_server "$1.0" 0 2 "${args[@]}"
    local p0=$port
    start_server "$1.1" 1 2 "${args[@]}"
    local servers="127.0.0.1:$p0,127.0.0.1:$port"
    run_python "$2" "$TMP/$1.py.out" "$servers" 32,16 $steps "$TMP/$1.py.bin" &
    local py=$!
    "$BUILD/shardps-worker" --servers "$servers" --rank 0 "${args[@]}" --hidden 32,16 --steps $steps \
        --no-eval --dump-weights "$TMP/$1.c.bin" 2>"$TMP/$1.c.err" ||
        { cat "$TMP/$1.c.err" >&2; fail "$1: the C worker failed"; }
    wait $py || fail "$1: the Python worker failed"
}
shared same share
cmp "$TMP/same.c.bin" "$TMP/same.py.bin" || fail "the Python client's weights differ from the C worker's"
echo "PASS: the Python client pulls the C worker's weights bit for bit"
shared joined join
cmp "$TMP/joined.c.bin" "$TMP/joined.py.bin" || fail "the joining Python client's weights differ from the C worker's"
echo "PASS: a Python client that joins the C worker's tensors pulls its weights bit for bit"
