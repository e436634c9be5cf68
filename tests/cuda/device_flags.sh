#!/usr/bin/env bash
# --device from the user's side: the worker's first log line says what
# computes; --device cuda without a usable GPU is one clear line and exit 1
# (with a GPU, it computes on CUDA); --precision bf16 is one clear line and
# exit 1 on the CPU (with a GPU, the first line says bf16); an unknown device
# is a usage error; and shardps-cluster passes --device through to its
# workers. Nothing here needs a server: the workers fail at connecting, after
# choosing their device.
source "$(dirname "$0")/../integration/lib.sh"

WORKER="$BUILD/shardps-worker"
noserver=(--servers 127.0.0.1:1 --connect-timeout 0.2)

"$WORKER" --device auto "${noserver[@]}" 2>"$TMP/auto" && fail "worker ran without a server"
first=$(head -n 1 "$TMP/auto")
case "$first" in
*"compute on cuda: "*) gpu=1 ;;
*"compute on cpu: "*"(--device auto: "*) gpu=0 ;;
*) cat "$TMP/auto" >&2; fail "the first log line does not say what computes" ;;
esac

if [ "$gpu" = 1 ]; then
    "$WORKER" --device cuda "${noserver[@]}" 2>"$TMP/cuda" && fail "worker ran without a server"
    head -n 1 "$TMP/cuda" | grep -q "compute on cuda: " || { cat "$TMP/cuda" >&2; fail "--device cuda did not use the GPU"; }
else
    set +e
    "$WORKER" --device cuda "${noserver[@]}" >"$TMP/out" 2>"$TMP/cuda"
    rc=$?
    set -e
    [ "$rc" -eq 1 ] || { cat "$TMP/cuda" >&2; fail "--device cuda without a GPU exited $rc, not 1"; }
    [ "$(wc -l <"$TMP/cuda")" -eq 1 ] || { cat "$TMP/cuda" >&2; fail "--device cuda without a GPU printed more than one line"; }
    grep -q -- "--device cuda: .*; use --device cpu or auto" "$TMP/cuda" || { cat "$TMP/cuda" >&2; fail "--device cuda without a GPU did not say why"; }
fi

# One line and exit 1, before any connection: the CPU computes in float32.
one_line_exit_1() {
    local what=$1 pattern=$2
    shift 2
    set +e
    "$WORKER" "$@" "${noserver[@]}" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    set -e
    [ "$rc" -eq 1 ] || { cat "$TMP/err" >&2; fail "$what exited $rc, not 1"; }
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || { cat "$TMP/err" >&2; fail "$what printed more than one line"; }
    grep -q -- "$pattern" "$TMP/err" || { cat "$TMP/err" >&2; fail "$what did not say why"; }
}
one_line_exit_1 "--precision bf16 --device cpu" "--precision bf16 needs --device cuda" \
    --precision bf16 --device cpu
if [ "$gpu" = 1 ]; then
    "$WORKER" --precision bf16 "${noserver[@]}" 2>"$TMP/bf16" && fail "worker ran without a server"
    head -n 1 "$TMP/bf16" | grep -q "compute on cuda: .*bf16 products" ||
        { cat "$TMP/bf16" >&2; fail "--precision bf16 did not compute in bf16 on the GPU"; }
else
    one_line_exit_1 "--precision bf16 without a GPU" "--precision bf16: .*; use --device cpu with --precision fp32" \
        --precision bf16
fi

"$WORKER" --device cpu --tf32 "${noserver[@]}" 2>"$TMP/cpu" && fail "worker ran without a server"
head -n 1 "$TMP/cpu" | grep -q "compute on cpu: .*--tf32 ignored" || { cat "$TMP/cpu" >&2; fail "--device cpu --tf32 not reported"; }

set +e
"$WORKER" --device gpu 2>"$TMP/bad"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "--device gpu exited $rc, not 2"
grep -q "accepted: auto|cpu|cuda" "$TMP/bad" || { cat "$TMP/bad" >&2; fail "--device gpu did not list the choices"; }

# The cluster hands --device to every worker: forced onto the CPU, each
# worker's first line says so.
"$CLUSTER" --servers 1 --workers 2 --steps 2 --device cpu --progress-every 1 >"$TMP/cl.out" 2>"$TMP/cl.err" ||
    { cat "$TMP/cl.err" >&2; fail "a 2-step cluster on --device cpu failed"; }
[ "$(grep -c "compute on cpu: " "$TMP/cl.err")" -eq 2 ] || { cat "$TMP/cl.err" >&2; fail "the workers did not both compute on the CPU"; }
grep -q -- "--device auto" "$TMP/cl.err" && { cat "$TMP/cl.err" >&2; fail "--device cpu reached the workers as auto"; }
echo "PASS: --device"
