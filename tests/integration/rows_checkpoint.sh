#!/usr/bin/env bash
# Embedding rows are durable, and a checkpoint restores onto another number
# of servers (issue 24 point 5): real servers, sync, two Python ranks
# (tests/python/rows_ckpt_job.py: Adam and Adagrad rows, admission at the
# second push, expiry after 5 steps, dense Adam beside).
# 1. A run of 2 servers stopped at step 10 with a checkpoint there, restored
#    onto 2 servers and trained on to step 20, ends with the same dense
#    weights and rows of every ID the job used, bit for bit, as an
#    uninterrupted 20-step run; the servers say how many rows they took
#    back, and hold as many at the end. Each server's rows counters
#    (created, admitted, evicted in its summary) equal its counterpart's in
#    the uninterrupted run: they go on from the checkpoint's.
# 2. The same checkpoint restored onto 3 servers with another chunk size
#    (each server reads both files, keeps its new partition's dense values
#    and the rows that hash to it, sums the sketches) trains on to the same
#    bytes; so does a 3-server checkpoint restored onto 2. The counters'
#    sum over the servers equals the uninterrupted run's (the rule of a
#    restore onto another number of servers: server 0 carries the job's
#    counts, the others start at 0, and say so).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

# run NAME SERVERS CHUNK STEPS SERVER-ARGS...: a job of SERVERS servers and 2
# ranks up to STEPS, tensors cut into CHUNK-byte chunks; rank 0 writes
# $TMP/NAME.bin, server i logs into $TMP/NAME.server.i.err.
run() {
    local name=$1 n=$2 chunk=$3 steps=$4 ports=() servers=() pids=() addrs
    shift 4
    for ((i = 0; i < n; i++)); do
        mkfifo "$TMP/$name.port.$i"
        "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index "$i" \
            --num-servers "$n" --workers 2 --mode sync --optimizer adam --lr 0.01 \
            --lr-schedule constant --chunk-bytes "$chunk" "$@" \
            3>"$TMP/$name.port.$i" 2>"$TMP/$name.server.$i.err" &
        servers+=($!)
        read -r -t 30 port <"$TMP/$name.port.$i" || fail "$name: server $i did not report its port"
        ports+=("127.0.0.1:$port")
    done
    addrs=$(IFS=,; echo "${ports[*]}")
    for r in 0 1; do
        LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 \
            "$PYTHON" "$PY_TESTS/rows_ckpt_job.py" worker "$addrs" "$r" 2 "$steps" \
            "$TMP/$name.bin" "$chunk" >"$TMP/$name.w$r.out" 2>&1 &
        pids+=($!)
    done
    for r in 0 1; do
        wait "${pids[$r]}" || { cat "$TMP/$name.w$r.out" >&2; fail "$name: rank $r failed"; }
    done
    for ((i = 0; i < n; i++)); do
        wait "${servers[$i]}" ||
            { cat "$TMP/$name.server.$i.err" >&2; fail "$name: server $i did not exit 0"; }
    done
}

# stored NAME SERVERS: the rows the servers of run NAME held at the end.
stored() {
    local total=0 line
    for ((i = 0; i < $2; i++)); do
        line=$(grep "summary of 2 row tables" "$TMP/$1.server.$i.err") ||
            fail "$1: server $i logged no rows summary"
        total=$((total + $(sed -n 's/.* rows \([0-9]*\) stored,.*/\1/p' <<<"$line")))
    done
    echo "$total"
}

# counts NAME SERVER: "created admitted evicted" of server SERVER's rows summary.
counts() {
    sed -n 's/.*summary of 2 row tables:.* \([0-9]*\) created, \([0-9]*\) admitted, \([0-9]*\) evicted.*/\1 \2 \3/p' \
        "$TMP/$1.server.$2.err"
}

# summed NAME SERVERS: the counts of run NAME's servers added up.
summed() {
    local c a e tc=0 ta=0 te=0
    for ((i = 0; i < $2; i++)); do
        read -r c a e <<<"$(counts "$1" "$i")"
        [ -n "$e" ] || fail "$1: server $i logged no rows counts"
        tc=$((tc + c)) ta=$((ta + a)) te=$((te + e))
    done
    echo "$tc $ta $te"
}

# restored NAME SERVERS: the rows the servers of run NAME restored at clock 10.
restored() {
    local total=0 line n
    for ((i = 0; i < $2; i++)); do
        line=$(grep "restored clock 10 from .*embedding rows)" "$TMP/$1.server.$i.err") ||
            { cat "$TMP/$1.server.$i.err" >&2; fail "$1: server $i did not restore its rows"; }
        n=$(sed -n 's/.*(\([0-9]*\) embedding rows).*/\1/p' <<<"$line")
        [ "$n" -gt 0 ] || fail "$1: server $i restored no rows: $line"
        total=$((total + n))
    done
    echo "$total"
}

# same NAME SERVERS: run NAME ended with the uninterrupted run's bytes and rows.
same() {
    grep -q "rank 0: steps 10..20" "$TMP/$1.w0.out" || fail "$1: the ranks did not start at 10"
    cmp "$TMP/whole.bin" "$TMP/$1.bin" ||
        fail "$1: the restored run's weights and rows differ from the uninterrupted run's"
    [ "$(stored "$1" "$2")" -eq "$(stored whole 2)" ] ||
        fail "$1: $(stored "$1" "$2") rows stored at the end, $(stored whole 2) uninterrupted"
    [ "$(summed "$1" "$2")" = "$(summed whole 2)" ] ||
        fail "$1: rows created, admitted, evicted $(summed "$1" "$2") in all, $(summed whole 2)" \
            "uninterrupted"
}

run whole 2 4096 20
run first 2 4096 10 --checkpoint-dir "$TMP/ck" --checkpoint-every 10
for i in 0 1; do
    [ -f "$TMP/ck/server-$i-clock-000000000010.ckpt" ] || fail "no checkpoint of server $i at 10"
done
cp -r "$TMP/ck" "$TMP/ck3"
run resumed 2 4096 20 --checkpoint-dir "$TMP/ck" --restore
same resumed 2
for i in 0 1; do
    [ "$(counts resumed $i)" = "$(counts whole $i)" ] ||
        fail "resumed: server $i counted $(counts resumed $i) (created, admitted, evicted)," \
            "$(counts whole $i) uninterrupted"
    grep -q "row counts go on from [1-9]" "$TMP/resumed.server.$i.err" ||
        fail "resumed: server $i did not say what its row counts go on from"
done
echo "2 -> 2: $(restored resumed 2) rows restored at clock 10; trained on to 20, equal to the" \
    "uninterrupted run bit for bit ($(stat -c %s "$TMP/whole.bin") bytes, $(stored whole 2) rows)"

run grown 3 256 20 --checkpoint-dir "$TMP/ck3" --restore
grep -q "re-placed" "$TMP/grown.server.2.err" || fail "server 2 did not re-place the 2 files"
[ "$(restored grown 3)" -eq "$(restored resumed 2)" ] ||
    fail "3 servers restored $(restored grown 3) rows of the $(restored resumed 2) saved"
same grown 3
grep -q "row counts go on from .* (the job's, summed over the files" "$TMP/grown.server.0.err" &&
    grep -q "summary of 2 row tables.*MiB (with the job's counts from before the restore" \
        "$TMP/grown.server.0.err" ||
    fail "grown: server 0 did not say, and sum up, that it carries the job's row counts"
for i in 1 2; do
    grep -q "row counts start at 0 on this server" "$TMP/grown.server.$i.err" &&
        grep -q "summary of 2 row tables.*MiB (counted since the restore: server 0 carries" \
            "$TMP/grown.server.$i.err" ||
        fail "grown: server $i did not say, and sum up, that its row counts start at 0"
done
grep -q "summary of 2 row tables.*MiB$" "$TMP/resumed.server.0.err" ||
    fail "resumed: a restore onto as many servers notes something about its row counts"
echo "2 -> 3 (256-byte chunks): the same rows re-placed and the same bytes at 20;" \
    "rows created, admitted, evicted $(summed grown 3) in all, as uninterrupted"

run first3 3 256 10 --checkpoint-dir "$TMP/ck32" --checkpoint-every 10
run shrunk 2 4096 20 --checkpoint-dir "$TMP/ck32" --restore
same shrunk 2
echo "PASS: 2 -> 2, 2 -> 3 and 3 -> 2 restores train on to the uninterrupted run's bytes"
