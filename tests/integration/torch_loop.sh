#!/usr/bin/env bash
# shardps.torch in the loops people write (issue 23, points 4, 5 and 7), each
# worker against its own real server (tests/python/torch_loop.py): a loop
# that zeroes, changes or drops its gradients right after backward, while
# their pushes are in flight, ends with the plain loop's parameters bit for
# bit (the library pushes its own copy), and so does one that accumulates
# two half-loss passes with attach(accumulate=2); an optimizer's or a
# GradScaler's step and a second backward raise with the sentence to read;
# clip_norm clips as --clip-norm does; two ranks through ps.sampler train on
# disjoint samples that cover the data, and check_sampler refuses a loader
# that would deal both the same; the servers' optimizers are torch.optim's
# within a derived float32 bound.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

start_server() { # name args...: one server (of one worker unless args say); its port in $port
    mkfifo "$TMP/port.$1"
    "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index 0 --num-servers 1 \
        --workers 1 "${@:2}" 3>"$TMP/port.$1" 2>"$TMP/server.$1.err" &
    read -r port <"$TMP/port.$1"
}

run_torch() { # out-file args...: tests/python/torch_loop.py, failing with its output
    local out=$1
    shift
    LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 \
        "$PYTHON" "$PY_TESTS/torch_loop.py" "$@" >"$out" 2>&1 ||
        { cat "$out" >&2; fail "torch_loop.py $* failed"; }
}

# Every server first, then one Python process runs every check in turn
# (PyTorch takes seconds to import): calls holds torch_loop.py's runs.
calls=()
ending=() # servers that end when their one worker leaves
stray=()  # servers of refused loops, whose workers leave without a goodbye

# Each rank trains on its own share: two ranks of one sync job, each through
# a DataLoader with ps.sampler, see disjoint samples that cover the dataset.
# Rank 1 runs beside; rank 0's run comes first.
start_server shard --workers 2 --optimizer sgd --lr 0.1
ending+=($!)
run_torch "$TMP/shard1.out" shard "127.0.0.1:$port" 1 "$TMP/shard1.txt" &
rank1=$!
calls+=(shard "127.0.0.1:$port" 0 "$TMP/shard0.txt" --)

# Gradients zeroed, changed or dropped right after backward, while their
# pushes travel, and two half-loss passes accumulated: the plain loop's
# parameters, bit for bit.
variants=(plain zero_grad none inplace drop accumulate)
for variant in "${variants[@]}"; do
    start_server "$variant" --optimizer sgd --momentum 0.9 --lr 0.05 --lr-schedule constant \
        --chunk-bytes 1024
    ending+=($!)
    calls+=(loop "127.0.0.1:$port" "$variant" 6 "$TMP/$variant.bin" --)
done

# What attach cannot serve raises, with the sentence to read.
for case in optimizer scaler twice args; do
    start_server "$case" --optimizer sgd --lr 0.1 --lr-schedule constant --chunk-bytes 1024
    stray+=($!)
    calls+=(refuse "127.0.0.1:$port" "$case" --)
done

# clip_norm is the C worker's --clip-norm, per tensor, before the push.
start_server clip --optimizer sgd --momentum 0 --lr 0.5 --lr-schedule constant --chunk-bytes 1024
ending+=($!)
calls+=(clip "127.0.0.1:$port" --)

# The servers' optimizers follow torch.optim's formulas: one weight table,
# the same gradient every step, each step's weights against torch.optim's
# within the float32 bound that torch_loop.py's optim_tolerance derives.
while read -r kind lr mu wd; do
    start_server "$kind$mu" --optimizer "$kind" --lr "$lr" --momentum "$mu" --weight-decay "$wd" \
        --lr-schedule constant
    ending+=($!)
    calls+=(optim "127.0.0.1:$port" "$kind" "$lr" "$mu" "$wd" 5 --)
done <<EOF
sgd 0.1 0 0.01
sgd 0.1 0.9 0.01
nesterov 0.1 0.9 0.01
adam 0.01 0.9 0.01
adamw 0.01 0.9 0.1
EOF

run_torch "$TMP/torch.out" "${calls[@]}"
wait $rank1 || fail "shard: rank 1 failed"
kill "${stray[@]}" 2>/dev/null || true
for pid in "${ending[@]}"; do
    wait "$pid" || { cat "$TMP"/server.*.err >&2; fail "a server failed"; }
done
grep -E "^(raised|PASS)" "$TMP/torch.out"

for variant in "${variants[@]:1}"; do
    cmp "$TMP/plain.bin" "$TMP/$variant.bin" || fail "$variant: the parameters differ from the plain loop's"
done
echo "PASS: zero_grad(), set_to_none, in-place ops and deleted gradients while pushes travel change nothing"
echo "PASS: attach(accumulate=2) over two half-loss passes is the plain loop's step, bit for bit"
echo "PASS: an optimizer's or a GradScaler's step, a second backward and bad arguments raise"
echo "PASS: attach(clip_norm=...) clips each tensor's gradient before it is pushed"

# The two ranks' samples: 0..99 once each, neither share in order.
cat "$TMP/shard0.txt" "$TMP/shard1.txt" | tr ' ' '\n' | sort -n | cmp - <(seq 0 99) ||
    fail "the ranks' samples are not 0..99 once each"
for r in 0 1; do
    tr ' ' '\n' <"$TMP/shard$r.txt" | sort -nc 2>/dev/null && fail "rank $r's share is not shuffled"
done
echo "PASS: two ranks through ps.sampler train on disjoint samples that cover the data"

grep -E "^[a-z]+ step [0-9]" "$TMP/torch.out"
echo "PASS: the servers' sgd, momentum, nesterov, adam and adamw are torch.optim's"
