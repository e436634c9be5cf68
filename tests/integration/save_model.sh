#!/usr/bin/env bash
# A trained model saved with --save-model is the model the worker trained:
# its values are the --dump-weights bytes, bit for bit, and shardps-eval on it
# reproduces the test accuracy the run reported, exactly (the same forward on
# the same weights), and writes one prediction per test sample.
source "$(dirname "$0")/lib.sh"
EVAL="$BUILD/shardps-eval"
DATA=${SHARDPS_DATA_DIR:-/usr/share/datasets/fashion-mnist}

"$CLUSTER" --servers 2 --workers 2 --hidden 32 --steps 60 --batch 32 --lr 0.005 \
    --dump-weights "$TMP/w.bin" --save-model "$TMP/m.shps" --json >"$TMP/out" 2>"$TMP/err" ||
    { cat "$TMP/err" >&2; fail "training run failed"; }
line=$(tail -n 1 "$TMP/out")
acc=$(json_field "$line" test_accuracy)
[ -n "$acc" ] || fail "no test accuracy in: $line"

# The values are the last bytes of the saved file, before its CRC32C.
dump=$(stat -c %s "$TMP/w.bin")
saved=$(stat -c %s "$TMP/m.shps")
[ "$saved" -gt "$dump" ] || fail "saved model ($saved bytes) smaller than the weights ($dump)"
tail -c $((dump + 4)) "$TMP/m.shps" | head -c "$dump" | cmp - "$TMP/w.bin" ||
    fail "the saved values differ from the weights the worker trained"

"$EVAL" --model-file "$TMP/m.shps" --data "$DATA" --predictions "$TMP/p.csv" >"$TMP/eval.out" ||
    fail "shardps-eval failed"
eacc=$(json_field "$(tail -n 1 "$TMP/eval.out")" test_accuracy)
[ "$eacc" = "$acc" ] || fail "shardps-eval says $eacc, the run reported $acc"
[ "$(wc -l <"$TMP/p.csv")" -eq 10001 ] || fail "predictions: not one line per test sample"
head -n 1 "$TMP/p.csv" | grep -qx "index,label,predicted" || fail "predictions: no header"
echo "ok: saved model = trained weights; shardps-eval reproduces test accuracy $acc"
