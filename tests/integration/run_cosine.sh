#!/usr/bin/env bash
# The servers' cosine schedule under shardps-run with library workers
# (tests/python/cosine_worker.py: NumPy, Client.from_env), no --total-steps:
#  1. the span is the most steps a worker states (total_steps): rank 0
#     plans 12, rank 1 plans 8, the job runs 6; the servers say the schedule
#     spans 12 steps and each rank's weight is the sum of the rates of a
#     cosine over 12 steps (a constant rate, or one over 6 or 8, differs);
#  2. a worker that states no plan is refused before it trains, with one
#     line naming the fix, and the job fails.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

PY=(env LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 "$PYTHON" "$PY_TESTS/cosine_worker.py")
opts=(--servers 2 --workers 2 --threads 1 --steps 6 --progress-every 1 --optimizer sgd
    --momentum 0 --lr 0.1 --lr-schedule cosine --verbose)

# 1. The workers' plans span the schedule.
"$BUILD/shardps-run" "${opts[@]}" -- "${PY[@]}" 12 8 12 >"$TMP/plan.out" 2>"$TMP/plan.err" ||
    { cat "$TMP/plan.err" "$TMP/plan.out" >&2; fail "the job with planned steps failed"; }
for s in 0 1; do
    grep -q "\[server $s\] the cosine schedule spans 12 steps" "$TMP/plan.err" ||
        { cat "$TMP/plan.err" >&2; fail "server $s does not say the schedule spans 12 steps"; }
done
! grep -q "the cosine schedule has no span" "$TMP/plan.err" || fail "a server found no span"
for r in 0 1; do
    grep -q "^rank $r: w -0.5[0-9]*, cosine over 12: -0.5" "$TMP/plan.out" ||
        { cat "$TMP/plan.out" >&2; fail "rank $r's weight is not the cosine's over 12 steps"; }
done
echo "ok: the most steps a worker plans span the servers' cosine schedule"

# 2. No plan, no span: refused at the start, in one line.
if "$BUILD/shardps-run" "${opts[@]}" -- "${PY[@]}" 0 0 6 >"$TMP/none.out" 2>"$TMP/none.err"; then
    fail "a cosine job without a span exited 0"
fi
grep -q "rank [01]: shardps_connect: the job's cosine schedule has no span: tell this worker the steps it plans (option total-steps: Client(total_steps=N), attach(model, total_steps=N)), or give shardps-run --total-steps N or --lr-schedule constant$" "$TMP/none.err" ||
    { cat "$TMP/none.err" >&2; fail "a worker without a plan is not refused in one line"; }
! grep -q "training starts" "$TMP/none.err" || fail "the job without a span started training"
echo "ok: a cosine job whose workers plan no steps is refused at the start"
echo "PASS: the servers' cosine schedule spans the steps library workers plan under shardps-run"
