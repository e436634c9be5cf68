#!/usr/bin/env bash
# The user's own data: a NumPy data set written without NumPy (the .npy
# layout np.save uses: float32 samples (n, 784), int64 labels) trains a real
# server and worker to a high test accuracy, and a malformed file stops the
# worker before training with one line naming the file.
source "$(dirname "$0")/lib.sh"

# write_set DIR SAMPLES_DTYPE: 1024 training and 256 test samples of 10
# classes; class c lights features 78c..78c+77 over uniform noise.
write_set() {
    python3 - "$1" "$2" <<'PY'
import random, struct, sys
d, dtype = sys.argv[1], sys.argv[2]
def save(path, descr, shape, payload):
    head = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    hl = len(head) + 1
    hl += (64 - (10 + hl) % 64) % 64
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", hl) + (head.ljust(hl - 1) + "\n").encode())
        f.write(payload)
rng = random.Random(5)
for split, n in (("train", 1024), ("test", 256)):
    ys = [rng.randrange(10) for _ in range(n)]
    xs = []
    for c in ys:
        xs.extend((1.0 if j // 78 == c else 0.0) + rng.uniform(-0.5, 0.5) for j in range(784))
    code = "d" if dtype == "<f8" else "f"
    save(f"{d}/{split}_x.npy", dtype, "(%d, 784)" % n, struct.pack("<%d%s" % (len(xs), code), *xs))
    save(f"{d}/{split}_y.npy", "<i8", "(%d,)" % n, struct.pack("<%dq" % n, *ys))
PY
}

# run_worker DIR: one server, one worker on DIR; the worker's exit status.
run_worker() {
    rm -f "$TMP/port"
    mkfifo "$TMP/port"
    "$BUILD/shardps-server" --listen 127.0.0.1:0 --num-servers 1 --workers 1 --optimizer sgd \
        --lr 0.1 --ready-fd 3 3>"$TMP/port" 2>"$TMP/server.err" &
    server=$!
    read -r port <"$TMP/port"
    status=0
    "$BUILD/shardps-worker" --servers "127.0.0.1:$port" --workers 1 --rank 0 --batch 32 \
        --optimizer sgd --lr 0.1 --epochs 3 --data-dir "$1" 2>"$TMP/worker.err" || status=$?
    kill "$server" 2>/dev/null || true
    wait "$server" || true
    return "$status"
}

mkdir "$TMP/good" "$TMP/f8"
write_set "$TMP/good" "<f4"
run_worker "$TMP/good" || { cat "$TMP/worker.err" >&2; fail "worker failed on .npy data"; }
acc=$(sed -n 's/.*epoch 3: test accuracy \([0-9.]*\).*/\1/p' "$TMP/worker.err")
[ -n "$acc" ] || { cat "$TMP/worker.err" >&2; fail "no test accuracy after epoch 3"; }
at_least "$acc" 0.9 || fail "test accuracy $acc on an easy data set"

write_set "$TMP/f8" "<f8"
run_worker "$TMP/f8" && fail "worker trained on float64 samples"
grep -q "$TMP/f8/train_x.npy: samples are <f8; they must be uint8 or float32" "$TMP/worker.err" ||
    { cat "$TMP/worker.err" >&2; fail "float64 samples not refused by name"; }
grep -q "step 1" "$TMP/worker.err" && fail "worker trained before refusing the data"
echo "PASS: .npy data trains to $acc; float64 samples refused"
