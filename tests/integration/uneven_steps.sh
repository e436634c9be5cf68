#!/usr/bin/env bash
# Workers with different step counts (the end of uneven shards): the one that
# finishes first leaves the barrier, the other completes alone, and the server
# exits 0 once both are gone. Daemons started by hand, as on separate hosts;
# the server reports its port through a FIFO, so nothing polls.
source "$(dirname "$0")/lib.sh"

mkfifo "$TMP/port"
job=(--workers 2 --optimizer sgd --lr 0.05) # every process of the job takes these
"$BUILD/shardps-server" --listen 127.0.0.1:0 --num-servers 1 "${job[@]}" \
    --ready-fd 3 3>"$TMP/port" 2>"$TMP/server.err" &
server=$!
# A failed check must not leave the server or a worker running.
w0= w1=
trap 'kill $server $w0 $w1 2>/dev/null || true; rm -rf "$TMP"' EXIT
read -r port <"$TMP/port"
common=(--servers "127.0.0.1:$port" "${job[@]}" --batch 32 --no-eval --progress-every 50)
"$BUILD/shardps-worker" "${common[@]}" --rank 0 --steps 150 2>"$TMP/w0.err" &
w0=$!
"$BUILD/shardps-worker" "${common[@]}" --rank 1 --steps 100 2>"$TMP/w1.err" &
w1=$!
wait "$w1" || { cat "$TMP/w1.err" >&2; fail "worker 1 failed"; }
wait "$w0" || { cat "$TMP/w0.err" >&2; fail "worker 0 failed"; }
wait "$server" || { cat "$TMP/server.err" >&2; fail "server failed"; }
grep -q "worker 1 (.*) left at clock 100 (finished); 1 worker still live" "$TMP/server.err" ||
    fail "worker 1 did not leave after its 100 steps"
grep -q "worker 0 (.*) left at clock 150 (finished); no workers live" "$TMP/server.err" ||
    fail "worker 0 did not finish its 150 steps alone"
echo "PASS: uneven step counts end cleanly"
