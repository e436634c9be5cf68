#!/usr/bin/env bash
# A synthetic model the size of a real one (issue 23, point 1): 4,096 tensors
# with 255-byte names, declared through libshardps by rank 0 and rank 1 of 2
# sync servers, trains 10 steps (ps-big-table). The table travels in TABLE
# frames (over 1 MiB, where the HELLO's header allowed 64 KiB), both ranks
# end with the same weights byte for byte, and the servers said they hold
# 4096 tensors. Rank 1 starts first: it waits for rank 0's declaration like
# any worker.
source "$(dirname "$0")/lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

start_server() { # index
    mkfifo "$TMP/port.$1"
    "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index "$1" --num-servers 2 \
        --workers 2 3>"$TMP/port.$1" 2>"$TMP/server.$1.err" &
    read -r port <"$TMP/port.$1"
}
start_server 0
p0=$port
start_server 1
servers="127.0.0.1:$p0,127.0.0.1:$port"
for rank in 1 0; do
    "$BUILD/tests/ps-big-table" --servers "$servers" --rank $rank --workers 2 --steps 10 \
        --out "$TMP/w.$rank" >"$TMP/out.$rank" 2>"$TMP/err.$rank" &
    eval "pid$rank=$!"
done
# shellcheck disable=SC2154
wait "$pid0" || { cat "$TMP/err.0" "$TMP/server.0.err" >&2; fail "rank 0 failed"; }
# shellcheck disable=SC2154
wait "$pid1" || { cat "$TMP/err.1" >&2; fail "rank 1 failed"; }
grep -q "^10 steps of 4096 tensors with 255-byte names" "$TMP/out.0" ||
    { cat "$TMP/out.0" >&2; fail "rank 0 did not train 10 steps"; }
cmp "$TMP/w.0" "$TMP/w.1" || fail "the ranks' weights differ"
grep -q "holds .* chunks of 4096 tensors" "$TMP/server.0.err" ||
    { cat "$TMP/server.0.err" >&2; fail "server 0 does not hold the 4096 tensors"; }
echo "PASS: $(cat "$TMP/out.0")"
