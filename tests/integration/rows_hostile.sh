#!/usr/bin/env bash
# Issue 24's bad rows input against a real shardps-server process (sync, one
# worker, a row table "emb" of dim 4 declared by the peers themselves):
# ps-hostile-client's rows-* scenarios send a rows pull of 100 million IDs
# (its header only: refused on the count, before a byte is buffered), a
# rows push 4 bytes short of its count, a pull naming an ID twice, NaN rows
# (refused and acknowledged so, the rows then read back unchanged, the
# connection kept), and a second declarer of the table with twice the dim
# (refused, the difference named). Each refusal must be in the server's log
# with its reason and the peer's address; the server then ends cleanly on
# the rank's goodbye and its summary counts the refused rows requests.
# Synchronisation is by the port FIFO, blocking reads with timeouts and
# wait: no sleeps.
source "$(dirname "$0")/lib.sh"
HOSTILE="$BUILD/tests/ps-hostile-client"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

mkfifo "$TMP/port"
"$BUILD/shardps-server" --listen 127.0.0.1:0 --num-servers 1 --workers 1 --mode sync \
    --heartbeat-timeout off --max-row-ids 65536 --ready-fd 3 3>"$TMP/port" 2>"$TMP/server.err" &
server=$!
read -r -t 30 port <"$TMP/port" || fail "the server did not report its port"

client=("$HOSTILE" --server "127.0.0.1:$port" --input 8 --hidden 16 --classes 2 --row-dim 4
    --workers 1 --rank 0 --timeout 30)
"${client[@]}" rows-too-many rows-short rows-dup rows-nan rows-dim >"$TMP/rows.out" 2>&1 ||
    rc=$?
cat "$TMP/rows.out"
[ "${rc:-0}" = 0 ] || { cat "$TMP/server.err" >&2; fail "a rows scenario did not end as it must"; }

check_logged() { # scenario words...: the server's log names the refusal of that scenario's peer
    local addr
    addr=$(awk -v n="$1" '$2 == n { print $3 }' "$TMP/rows.out")
    [ -n "$addr" ] || fail "no result line for $1"
    grep -E "closing (peer $addr|worker [0-9]+ \($addr\)): .*$2" "$TMP/server.err" >/dev/null ||
        { cat "$TMP/server.err" >&2; fail "no refusal of $1 ($addr) naming '$2' in the log"; }
}
check_logged rows-too-many "100000000 row IDs; this server takes at most 65536"
check_logged rows-short "it needs 48"
check_logged rows-dup "names ID 5 twice"
grep -q "refused a rows push from worker 0 .*: row table emb: a rows push holds a non-finite" \
    "$TMP/server.err" || { cat "$TMP/server.err" >&2; fail "the NaN push's refusal is not logged"; }
grep -Eq "row table emb: dim 8 from the worker, 4 on this server" "$TMP/server.err" ||
    { cat "$TMP/server.err" >&2; fail "the dim mismatch is not logged"; }

"${client[@]}" bye >"$TMP/bye.out" 2>&1 || fail "the rank could not say goodbye: $(cat "$TMP/bye.out")"
wait "$server" || { cat "$TMP/server.err" >&2; fail "the server did not exit 0"; }
grep -q "0 rows pulls\|rows requests refused" "$TMP/server.err" ||
    { cat "$TMP/server.err" >&2; fail "no rows summary"; }
refused=$(sed -n 's/.* \([0-9]*\) rows requests refused.*/\1/p' "$TMP/server.err" | tail -n 1)
[ "$refused" = 2 ] || fail "the summary counts $refused refused rows requests, not 2 (dup, NaN)"
echo "PASS: every bad rows request refused and logged; the server ended cleanly"
