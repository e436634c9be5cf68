#!/usr/bin/env bash
# Hostile peers against a real server while a real worker trains (issue 5,
# item 4). One server (async, 2 ranks) and worker 0 are started by hand; once
# the worker has joined, ps-hostile-client holds a connection that never says
# anything and runs every other scenario as rank 1: random bytes, truncated
# and oversized frames, a wrong version, model and rank, requests before the
# handshake and after it with bad keys, sizes (float32, float16, bfloat16) and
# dtypes, a PULL at clock 2^64-1, a PUSH header announcing 32 MiB for one
# chunk, a HEARTBEAT with a payload (issue 18), and a reader that floods pulls
# without reading (the server must stop reading it before its RSS grows past
# a bound). The server must log a reason naming each refused
# connection, the worker must finish every step, and the server must exit 0
# on its own once rank 1 has said goodbye too.
# Synchronisation is by FIFOs (the server's port, the worker's reports, the
# silent peer's "connected" line), blocking reads with timeouts and wait: no
# sleeps. The worker is still training when the scenarios end because it is
# held (SIGSTOP) at step GATE until they have, however long they take; the
# server has no heartbeat timeout, so holding it changes nothing else. A
# smaller model than the default keeps it quick under ASan.
source "$(dirname "$0")/lib.sh"
HOSTILE="$BUILD/tests/ps-hostile-client"
STEPS=300
GATE=250
# The worker trains beside the scenarios for a while: STEPS x SLOW_MS at least.
SLOW_MS=20
# The slow reader's bound on the server's RSS growth, in MiB: the server stops
# reading a peer once two full pulls of its shard plus 16 MiB are queued for
# it (kv_server.c), and hands out no frame it has already buffered until the
# queue drains (transport.c); the rest is allocator slack.
MAX_GROWTH=100
growth=() heartbeat=(--heartbeat-timeout off)

model=(--hidden 64,32)
job=(--mode async --optimizer sgd --lr 0.05) # the real worker runs with the server's settings
mkfifo "$TMP/port" "$TMP/report" "$TMP/silent"
"$BUILD/shardps-server" --listen 127.0.0.1:0 --num-servers 1 --workers 2 --mode async \
    "${job[@]}" "${heartbeat[@]}" --ready-fd 3 3>"$TMP/port" 2>"$TMP/server.err" &
server=$!
read -r -t 30 port <"$TMP/port" || fail "the server did not report its port"

# Held at GATE for as long as the scenarios take, it must not give up on the
# server on waking up.
"$BUILD/shardps-worker" --servers "127.0.0.1:$port" --workers 2 --rank 0 "${model[@]}" "${job[@]}" \
    --batch 32 --steps "$STEPS" --slow-ms "$SLOW_MS" --no-eval --progress-every 100 \
    --report-steps "$GATE" --request-timeout 3600 --report-fd 4 4>"$TMP/report" 2>"$TMP/w0.err" &
worker=$!
trap 'kill -CONT "$worker" 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
# The worker's first report is sent once it has joined: only then may rank 1
# join, so training starts with the real worker in it.
exec 5<"$TMP/report"
read -r -t 60 -u 5 line || { cat "$TMP/w0.err" >&2; fail "the worker never joined"; }
case "$line" in *'"event":"start"'*) ;; *) fail "unexpected first worker report: $line" ;; esac

client=("$HOSTILE" --server "127.0.0.1:$port" "${model[@]}" --workers 2 --rank 1 --timeout 30)
"${client[@]}" --silent-wait 90 silent >"$TMP/silent" 2>"$TMP/silent.err" &
silent=$!
exec 6<"$TMP/silent"
read -r -t 30 -u 6 line || fail "the silent peer did not connect"

"${client[@]}" --server-pid "$server" --max-growth "$MAX_GROWTH" "${growth[@]}" all \
    >"$TMP/hostile.out" 2>&1 &
hostile=$!
# The worker's reports until it has done step GATE; there it waits for the
# scenarios to end.
step=0
while [ "$step" -lt "$GATE" ]; do
    read -r -t 600 -u 5 line || { cat "$TMP/w0.err" >&2; fail "the worker never reported step $GATE"; }
    case "$line" in *'"event":"step"'*) step=$(json_field "$line" step) ;; esac
done
kill -STOP "$worker"
wait "$hostile" || hostile_rc=$?
cat "$TMP/hostile.out"
[ "${hostile_rc:-0}" = 0 ] || fail "a hostile scenario did not end as it must (FAIL lines above)"
# Rank 1 was borrowed by the scenarios; the server waits for every rank that
# left without finishing, so give it back with a clean goodbye.
"${client[@]}" bye >"$TMP/bye.out" 2>&1 || fail "rank 1 could not say goodbye: $(cat "$TMP/bye.out")"
# Log lines so far: the worker's "left" line must come after them.
marks=$(wc -l <"$TMP/server.err")
kill -CONT "$worker"
cat <&5 >"$TMP/report.rest" &
drain=$!

wait "$worker" || { cat "$TMP/w0.err" >&2; fail "the worker failed beside the hostile peers"; }
wait "$server" || { cat "$TMP/server.err" >&2; fail "the server did not exit 0"; }
wait "$silent" || { cat "$TMP/silent.err" >&2; fail "the silent peer was not closed at shutdown"; }
cat <&6 >"$TMP/silent.out"
grep -q "^PASS silent" "$TMP/silent.out" || fail "silent peer: $(cat "$TMP/silent.out")"
wait "$drain" || true

# Every refused connection is in the server's log with its reason, matched by
# the client's own address.
while read -r verdict name addr detail; do
    [ "$verdict" = PASS ] || continue
    case "$name" in
    truncated) continue ;; # the client hangs up mid-frame: nothing to refuse
    esac
    grep -Eq "closing (peer $addr|worker [0-9]+ \($addr\)): " "$TMP/server.err" ||
        { cat "$TMP/server.err" >&2; fail "no 'closing ...' reason logged for $name ($addr)"; }
done <"$TMP/hostile.out"
n=$(grep -c '^PASS' "$TMP/hostile.out")
[ "$n" -ge 20 ] || fail "only $n hostile scenarios ran"

grep -q "worker 0 (.*) left at clock $STEPS (finished)" "$TMP/server.err" ||
    { cat "$TMP/server.err" >&2; fail "worker 0 did not finish its $STEPS steps"; }
# The worker was still training when the last scenario ended.
finished=$(grep -n "worker 0 (.*) left at clock" "$TMP/server.err" | head -n 1 | cut -d: -f1)
[ "$finished" -gt "$marks" ] ||
    fail "worker 0 finished before the hostile scenarios did"
grep -q '"event":"done"' "$TMP/report.rest" || fail "the worker sent no final report"
echo "PASS: $n hostile scenarios refused and logged while worker 0 trained $STEPS steps"
