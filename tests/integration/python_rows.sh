#!/usr/bin/env bash
# Embedding rows from Python (issue 24 point 6) on two real servers, sync,
# two ranks (tests/python/rows_job.py): int64 IDs reinterpreted as uint64,
# rows split between the servers by hash, repeats summed by the client, an
# empty push per table and step; every rank's rows equal a NumPy reference
# of the job bit for bit at every step; bad arguments raise naming the
# table. The servers' summary lines count the rows they created.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

ports=() servers=()
for i in 0 1; do
    mkfifo "$TMP/port.$i"
    "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index "$i" --num-servers 2 \
        --workers 2 --mode sync --optimizer sgd --momentum 0 --lr 0.1 --lr-schedule constant \
        --chunk-bytes 4096 3>"$TMP/port.$i" 2>"$TMP/server.$i.err" &
    servers+=($!)
    read -r -t 30 port <"$TMP/port.$i" || fail "server $i did not report its port"
    ports+=("127.0.0.1:$port")
done
addrs=$(IFS=,; echo "${ports[*]}")
pids=()
for r in 0 1; do
    LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 \
        "$PYTHON" "$PY_TESTS/rows_job.py" worker "$addrs" "$r" 2 6 >"$TMP/w$r.out" 2>&1 &
    pids+=($!)
done
for r in 0 1; do
    wait "${pids[$r]}" || { cat "$TMP/w$r.out" >&2; fail "rank $r failed"; }
    cat "$TMP/w$r.out"
done
# Every rank said goodbye: the servers exit 0 on their own.
for i in 0 1; do
    wait "${servers[$i]}" || { cat "$TMP/server.$i.err" >&2; fail "server $i did not exit 0"; }
done
created=0
for i in 0 1; do
    line=$(grep "summary of 2 row tables" "$TMP/server.$i.err") ||
        { cat "$TMP/server.$i.err" >&2; fail "server $i logged no rows summary"; }
    echo "server $i: ${line#*summary of }"
    n=$(sed -n 's/.* rows [0-9]* stored, \([0-9]*\) created.*/\1/p' <<<"$line")
    [ "${n:-0}" -gt 0 ] || fail "server $i created no rows: $line"
    created=$((created + n))
done
echo "PASS: two Python ranks on two servers, rows equal to the reference; $created rows created"
