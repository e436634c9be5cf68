#!/usr/bin/env bash
# shardps.torch against DDP, step for step (issue 23, point 8;
# tests/python/ddp_proof.py): a small ResNet of torchvision's BasicBlock and
# a small Vision Transformer, each trained 50 steps by 2 workers in sync
# through 2 shardps servers and by DDP (gloo, 2 processes, one thread each),
# from the same initial values (rank 0's; each rank builds its model from its
# own seed) and the same batches (DistributedSampler on both sides): the
# losses of every step, the parameters, the buffers and an eval-mode loss
# agree within ddp_proof.py's tolerance, and the two controls, DDP without
# broadcast_buffers and shardps with init="server", miss by at least 100
# times it. Then parameters that steps leave unused (by every rank, or by
# one): a branchy MLP with momentum SGD (bit for bit) and Adam against
# DDP(find_unused_parameters=True) and torch.optim, which skip a parameter no
# rank used; the control, a zero gradient applied instead, misses.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

SCRIPT="$PY_TESTS/ddp_proof.py"
PY=(env LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 "$PYTHON")

# DDP first (its own processes, no shardps library in them).
OMP_NUM_THREADS=1 "$PYTHON" "$SCRIPT" ddp "$TMP" >"$TMP/ddp.out" 2>&1 ||
    { cat "$TMP/ddp.out" >&2; fail "the DDP runs failed"; }

# Per variant, a job of 2 servers for each model: 4 servers, ResNet's first.
servers=()
for variant in model server; do
    addrs=""
    for i in 0 1 2 3; do
        s=$((i % 2))
        mkfifo "$TMP/port.$variant.$i"
        "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index $s --num-servers 2 \
            --workers 2 --optimizer sgd --lr 0.03125 --momentum 0.9 --weight-decay 0 \
            --lr-schedule constant 3>"$TMP/port.$variant.$i" 2>"$TMP/server.$variant.$i.err" &
        servers+=($!)
        read -r port <"$TMP/port.$variant.$i"
        addrs="$addrs${addrs:+,}127.0.0.1:$port"
    done
    pids=()
    for r in 0 1; do
        "${PY[@]}" "$SCRIPT" shardps $r $variant "$addrs" "$TMP" >"$TMP/$variant.$r.out" 2>&1 &
        pids+=($!)
    done
    for r in 0 1; do
        wait "${pids[$r]}" || { cat "$TMP/$variant.$r.out" >&2; fail "shardps $variant: rank $r failed"; }
    done
done

# Unused parameters (issue 23 point 3): the branchy MLP, whose branches some
# steps use on both ranks, one or neither, on a job of 2 servers per
# optimizer, against DDP(find_unused_parameters=True) with torch.optim.
for opt in sgd adam; do
    if [ $opt = sgd ]; then flags=(--optimizer sgd --lr 0.03125 --momentum 0.9 --weight-decay 0)
    else flags=(--optimizer adam --lr 0.00390625 --weight-decay 0.01); fi
    addrs=""
    for s in 0 1; do
        mkfifo "$TMP/port.$opt.$s"
        "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index $s --num-servers 2 \
            --workers 2 "${flags[@]}" --lr-schedule constant 3>"$TMP/port.$opt.$s" \
            2>"$TMP/server.$opt.$s.err" &
        servers+=($!)
        read -r port <"$TMP/port.$opt.$s"
        addrs="$addrs${addrs:+,}127.0.0.1:$port"
    done
    pids=()
    for r in 0 1; do
        "${PY[@]}" "$SCRIPT" unused $r $opt "$addrs" "$TMP" >"$TMP/unused.$opt.$r.out" 2>&1 &
        pids+=($!)
    done
    for r in 0 1; do
        wait "${pids[$r]}" || { cat "$TMP/unused.$opt.$r.out" >&2; fail "shardps unused $opt: rank $r failed"; }
    done
done
for pid in "${servers[@]}"; do
    wait "$pid" || { cat "$TMP"/server.*.err >&2; fail "a server failed"; }
done

"$PYTHON" "$SCRIPT" compare "$TMP" || fail "shardps and DDP do not agree (or a control does not miss)"
"$PYTHON" "$SCRIPT" compare-unused "$TMP" ||
    fail "unused parameters: shardps and DDP(find_unused_parameters=True) do not agree (or the control does not miss)"
