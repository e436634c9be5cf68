#!/usr/bin/env bash
# A convolutional model from a model file trains through the whole system:
# 2 servers, 2 workers in sync, a small CNN (conv2d, ReLU, max-pool, dropout,
# dense) on Fashion-MNIST for 150 steps. It must learn: chance is 0.10, and
# 150 Adam steps of 64 samples take even a linear model past 0.70 (the MLP
# job reaches 0.76 in 40), so 0.50 fails a model that does not train
# (gradients lost or misrouted, a layer's backward wrong) and passes one that
# does. The servers learn the conv tensors' table from the workers.
source "$(dirname "$0")/lib.sh"

cat >"$TMP/small.model" <<'M'
conv2d out=8 kernel=3 pad=1
relu
maxpool kernel=2
flatten
dropout p=0.1
dense out=classes
M
"$CLUSTER" --servers 2 --workers 2 --model "$TMP/small.model" --steps 150 --batch 32 \
    --lr 0.002 --progress-every 50 --json >"$TMP/out" 2>"$TMP/err" ||
    { cat "$TMP/err" >&2; fail "CNN cluster failed"; }
line=$(tail -n 1 "$TMP/out")
acc=$(json_field "$line" test_accuracy)
[ -n "$acc" ] || fail "no test accuracy in: $line"
at_least "$acc" 0.5 || fail "the CNN did not learn: test accuracy $acc after 150 steps"
echo "ok: CNN test accuracy $acc after 150 steps"
