#!/usr/bin/env bash
# Embedding rows are durable (issue 24 point 5): two real servers, sync, two
# Python ranks (tests/python/rows_ckpt_job.py: Adam and Adagrad rows,
# admission at the second push, expiry after 5 steps, dense Adam beside).
# A run stopped at step 10 with a checkpoint there, restored and trained on
# to step 20, ends with the same dense weights and the same rows of every
# ID the job used, bit for bit, as an uninterrupted 20-step run; the
# restored servers say how many rows they took back and hold as many rows
# at the end as the uninterrupted ones.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

# run NAME STEPS SERVER-ARGS...: a job of 2 servers and 2 ranks up to STEPS;
# rank 0 writes $TMP/NAME.bin, server i logs into $TMP/NAME.server.i.err.
run() {
    local name=$1 steps=$2 ports=() servers=() pids=() addrs
    shift 2
    for i in 0 1; do
        mkfifo "$TMP/$name.port.$i"
        "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index "$i" \
            --num-servers 2 --workers 2 --mode sync --optimizer adam --lr 0.01 \
            --lr-schedule constant --chunk-bytes 4096 "$@" \
            3>"$TMP/$name.port.$i" 2>"$TMP/$name.server.$i.err" &
        servers+=($!)
        read -r -t 30 port <"$TMP/$name.port.$i" || fail "$name: server $i did not report its port"
        ports+=("127.0.0.1:$port")
    done
    addrs=$(IFS=,; echo "${ports[*]}")
    for r in 0 1; do
        LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 \
            "$PYTHON" "$PY_TESTS/rows_ckpt_job.py" worker "$addrs" "$r" 2 "$steps" \
            "$TMP/$name.bin" >"$TMP/$name.w$r.out" 2>&1 &
        pids+=($!)
    done
    for r in 0 1; do
        wait "${pids[$r]}" || { cat "$TMP/$name.w$r.out" >&2; fail "$name: rank $r failed"; }
    done
    for i in 0 1; do
        wait "${servers[$i]}" ||
            { cat "$TMP/$name.server.$i.err" >&2; fail "$name: server $i did not exit 0"; }
    done
}

# stored NAME: the rows the servers of run NAME held at the end.
stored() {
    local n=0 line
    for i in 0 1; do
        line=$(grep "summary of 2 row tables" "$TMP/$1.server.$i.err") ||
            fail "$1: server $i logged no rows summary"
        n=$((n + $(sed -n 's/.* rows \([0-9]*\) stored,.*/\1/p' <<<"$line")))
    done
    echo "$n"
}

run whole 20
run first 10 --checkpoint-dir "$TMP/ck" --checkpoint-every 10
for i in 0 1; do
    [ -f "$TMP/ck/server-$i-clock-000000000010.ckpt" ] || fail "no checkpoint of server $i at 10"
done
run resumed 20 --checkpoint-dir "$TMP/ck" --restore
taken=0
for i in 0 1; do
    line=$(grep "restored clock 10 from .*embedding rows)" "$TMP/resumed.server.$i.err") ||
        { cat "$TMP/resumed.server.$i.err" >&2; fail "server $i did not restore its rows"; }
    n=$(sed -n 's/.*(\([0-9]*\) embedding rows).*/\1/p' <<<"$line")
    [ "$n" -gt 0 ] || fail "server $i restored no rows: $line"
    taken=$((taken + n))
done
grep -q "rank 0: steps 10..20" "$TMP/resumed.w0.out" || fail "the resumed ranks did not start at 10"
cmp "$TMP/whole.bin" "$TMP/resumed.bin" ||
    fail "the restored run's weights and rows differ from the uninterrupted run's"
[ "$(stored whole)" -eq "$(stored resumed)" ] ||
    fail "rows stored at the end: $(stored whole) uninterrupted, $(stored resumed) restored"
echo "PASS: $taken rows restored at clock 10; the run trained on to 20 equals the uninterrupted" \
    "one bit for bit ($(stat -c %s "$TMP/whole.bin") bytes of weights and rows," \
    "$(stored whole) rows stored)"
