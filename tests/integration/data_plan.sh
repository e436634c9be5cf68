#!/usr/bin/env bash
# What a newcomer's first small data set must get right:
# 1. --steps N runs exactly N steps, however many epochs that is (it used
#    to stop at the default 10 epochs: 80 of 100 steps here), and neither
#    the log nor the progress line speaks of "10 epochs" or "epoch 1/10";
#    --epochs given as well ends the run at whichever comes first.
# 2. The data's sample shape and class count are logged at start; a stray
#    label (one sample labelled 200 among ten classes) that makes 201
#    classes is said, naming the label and how few samples it has.
source "$(dirname "$0")/lib.sh"

# write_set DIR STRAY: IDX files of 256 training and 64 test images of 4x4
# pixels, 10 classes (class c lights pixel c); with STRAY, one more training
# image labelled STRAY.
write_set() {
    python3 - "$1" "${2:-}" <<'PY'
import random, struct, sys
d, stray = sys.argv[1], sys.argv[2]
rng = random.Random(7)
for split, n in (("train", 256), ("t10k", 64)):
    ys = [i % 10 for i in range(n)] + ([int(stray)] if split == "train" and stray else [])
    px = bytes(min(255, (200 if j == c % 16 else 0) + rng.randrange(40)) for c in ys for j in range(16))
    with open(f"{d}/{split}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, len(ys), 4, 4) + px)
    with open(f"{d}/{split}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, len(ys)) + bytes(ys))
PY
}

mkdir "$TMP/small" "$TMP/stray"
write_set "$TMP/small"
write_set "$TMP/stray" 200
# run NAME ARGS...: a one-server, one-worker job of 8 steps an epoch.
run() {
    local name=$1
    shift
    "$CLUSTER" --servers 1 --workers 1 --hidden 16 --batch 32 --progress-every 20 "$@" \
        >"$TMP/$name.out" 2>"$TMP/$name.err" || { cat "$TMP/$name.err" >&2; fail "$name: the job failed"; }
}

run steps --data "$TMP/small" --steps 100
grep -q "done: 100 steps" "$TMP/steps.err" ||
    { grep "done:" "$TMP/steps.err" >&2; fail "--steps 100 did not run 100 steps"; }
grep -q "starting 1 server and 1 worker, mode sync, 100 steps (--steps), 12.5 epochs" "$TMP/steps.err" ||
    { grep starting "$TMP/steps.err" >&2; fail "the launcher does not say it runs 100 steps"; }
grep -q "10 epochs\|epoch [0-9]*/10 " "$TMP/steps.err" "$TMP/steps.out" &&
    fail "with --steps the log still speaks of the default 10 epochs"
grep -q "epoch 3/13 *step 20/100" "$TMP/steps.err" "$TMP/steps.out" ||
    { cat "$TMP/steps.err" >&2; fail "no progress line 'epoch 3/13 step 20/100'"; }
echo "ok: --steps 100 ran 100 steps over 13 epochs"

run both --data "$TMP/small" --steps 100 --epochs 2
grep -q "done: 16 steps" "$TMP/both.err" || fail "--epochs 2 did not end the run first"
grep -q "16 steps: --epochs 2 ends before --steps 100" "$TMP/both.err" ||
    fail "the launcher does not say --epochs ends the run"
echo "ok: --steps 100 --epochs 2 ran the 16 steps of 2 epochs"

grep -q "data: $TMP/small: 256 training and 64 test samples of 1x4x4 uint8, 10 classes" "$TMP/steps.err" ||
    { cat "$TMP/steps.err" >&2; fail "the data's shape and classes are not logged"; }
grep -q "WARN.*data:" "$TMP/steps.err" && fail "a warning about clean data"

run stray --data "$TMP/stray" --steps 4
grep -q "data: $TMP/stray: 257 training and 64 test samples of 1x4x4 uint8, 201 classes" "$TMP/stray.err" ||
    { cat "$TMP/stray.err" >&2; fail "the stray set's classes are not logged"; }
grep -q "WARN .*201 classes (the largest label + 1), but 190 of them have no training sample: 10..199; the largest training label, 200, has 1 sample" "$TMP/stray.err" ||
    { cat "$TMP/stray.err" >&2; fail "the stray label is not said"; }
# --check says it too, before anything runs.
"$CLUSTER" --check --data "$TMP/stray" --hidden 16 --batch 32 >"$TMP/check.out" 2>"$TMP/check.err" ||
    fail "--check refused the stray set"
grep -q "label + 1" "$TMP/check.err" || fail "--check did not say the stray label"
echo "PASS: --steps means N steps; the data's shape, classes and a stray label are said"
