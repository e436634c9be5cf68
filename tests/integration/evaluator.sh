#!/usr/bin/env bash
# The evaluator (issue 21): testing does not stop or change training.
#  1. A sync job of 2 workers and 2 servers with a token, with an evaluator
#     connected from before the start to the end (shardps-cluster --evaluator: the last rank starts
#     only once the evaluator follows) ends with the same final weights, bit
#     for bit, and the same test accuracy as the same job without one, in
#     which rank 0 stops to test every 20 steps; with the evaluator rank 0
#     tests only once, after its last step, and the curve has points in
#     applied steps and samples, from the first weights (step 0) on.
#  2. An evaluator that pushes (ps-hostile-client evaluator-push) is refused
#     with the reason, logged by the server; it took no worker's slot (the
#     server allows only the two workers' connections and one more), and the
#     job goes on: both workers finish and the server exits 0. A standalone
#     shardps-eval --follow --max-snapshots 1, in before the second worker
#     (it says "following" on SHARDPS_REPORT_FD), scores the first weights
#     and exits 0.
#  3. A standalone shardps-eval --follow without a limit follows a job to its
#     end and ends quietly: exit 0, its summary line, and no ERROR line (the
#     servers going away is how a followed job ends).
# Synchronisation is by FIFOs, reports and exits: no sleeps.
source "$(dirname "$0")/lib.sh"
HOSTILE="$BUILD/tests/ps-hostile-client"

# Two servers (the evaluator merges their steps) and a token (it proves it
# holds the workers' one).
printf 'correct horse battery staple\n' >"$TMP/token"
chmod 600 "$TMP/token"
job=(--servers 2 --workers 2 --mode sync --batch 32 --steps 60 --eval-every 20 --progress-every 20
    --auth-token-file "$TMP/token")
run() { # name cluster-args...
    local name=$1
    shift
    "$CLUSTER" "${job[@]}" --metrics-dir "$TMP/$name" --dump-weights "$TMP/$name.bin" "$@" --json \
        >"$TMP/$name.out" 2>"$TMP/$name.err" || { cat "$TMP/$name.err" >&2; fail "the $name run failed"; }
}
run plain
run followed --evaluator "$TMP/curve.jsonl"

cmp -s "$TMP/plain.bin" "$TMP/followed.bin" ||
    fail "the job with an evaluator ended with other weights than the job without"
acc_plain=$(json_field "$(tail -n 1 "$TMP/plain.out")" test_accuracy)
acc_followed=$(json_field "$(tail -n 1 "$TMP/followed.out")" test_accuracy)
[ -n "$acc_plain" ] && [ "$acc_plain" = "$acc_followed" ] ||
    fail "test accuracy $acc_followed with the evaluator, $acc_plain without"
# Rank 0 stopped to test at steps 20 and 40 and after its last step without
# the evaluator; with it, only after its last step.
[ "$(grep -c '"event":"eval"' "$TMP/plain/worker-0.jsonl")" = 3 ] || fail "the plain run did not test 3 times"
[ "$(grep -c '"event":"eval"' "$TMP/followed/worker-0.jsonl")" = 1 ] ||
    fail "with the evaluator rank 0 still stopped to test: $(grep '"event":"eval"' "$TMP/followed/worker-0.jsonl")"
! grep -q '"event":"eval"' "$TMP/followed/worker-1.jsonl" || fail "worker 1 tested"
# The evaluator was in before training started, and left without a word
# about the job's end.
[ "$(grep -c "evaluator (127.0.0.1:[0-9]*) joined at clock 0; it reads the weights and holds no rank" \
    "$TMP/followed.err")" = 2 ] || fail "the evaluator did not join both servers: $(grep -i evaluator "$TMP/followed.err")"
[ "$(grep -n 'evaluator (.*) joined' "$TMP/followed.err" | head -n 1 | cut -d: -f1)" -lt \
    "$(grep -n 'training starts' "$TMP/followed.err" | head -n 1 | cut -d: -f1)" ] ||
    fail "the evaluator joined after training started"
! grep -q "evaluator stopped" "$TMP/followed.err" || fail "the evaluator failed: $(cat "$TMP/followed.err")"
# The curve: a point at the first weights, then steps that never go back,
# samples = step x 64 (2 workers x 32), the newest chunk at most one step
# ahead of the oldest (sync), an accuracy and a loss.
[ -s "$TMP/curve.jsonl" ] || fail "the evaluator wrote no curve"
head -n 1 "$TMP/curve.jsonl" | grep -q '"step":0,"step_lo":0,"step_hi":0,"samples":0,' ||
    fail "the curve does not start at the first weights: $(head -n 1 "$TMP/curve.jsonl")"
prev=-1
while read -r line; do
    lo=$(json_field "$line" step_lo)
    hi=$(json_field "$line" step_hi)
    samples=$(json_field "$line" samples)
    acc=$(json_field "$line" test_accuracy)
    loss=$(json_field "$line" test_loss)
    [ "$(json_field "$line" step)" = "$lo" ] && [ "$lo" -ge "$prev" ] && [ "$hi" -ge "$lo" ] &&
        [ $((hi - lo)) -le 1 ] && [ "$hi" -le 60 ] && [ "$samples" = $((lo * 64)) ] &&
        at_least "$acc" 0 && at_least 1 "$acc" && at_least "$loss" 0 ||
        fail "malformed curve line: $line"
    prev=$lo
done <"$TMP/curve.jsonl"

# 2. A pushing evaluator beside a job held for its second worker.
mkfifo "$TMP/port" "$TMP/report"
"$BUILD/shardps-server" --listen 127.0.0.1:0 --num-servers 1 --workers 2 --max-connections 3 \
    --ready-fd 3 3>"$TMP/port" 2>"$TMP/server.err" &
server=$!
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
read -r -t 30 port <"$TMP/port" || fail "the server did not report its port"
worker() { # rank
    "$BUILD/shardps-worker" --servers "127.0.0.1:$port" --workers 2 --rank "$1" --hidden 64,32 \
        --batch 32 --steps 20 --no-eval "${@:2}" 2>"$TMP/w$1.err"
}
worker 0 --report-fd 4 4>"$TMP/report" &
w0=$!
exec 5<"$TMP/report"
read -r -t 60 -u 5 line || { cat "$TMP/w0.err" >&2; fail "worker 0 never joined"; }
cat <&5 >/dev/null &
"$HOSTILE" --server "127.0.0.1:$port" --hidden 64,32 --workers 2 --rank 1 --timeout 30 evaluator-push \
    >"$TMP/hostile.out" 2>&1 || { cat "$TMP/hostile.out" >&2; fail "the evaluator's push was not refused"; }
grep -q "^PASS evaluator-push" "$TMP/hostile.out" || fail "no PASS: $(cat "$TMP/hostile.out")"
grep -q "evaluator (127.0.0.1:[0-9]*) joined" "$TMP/server.err" || fail "the evaluator was not admitted"
grep -q "an evaluator is read-only: it cannot push" "$TMP/server.err" ||
    fail "the server did not log why it refused the push: $(cat "$TMP/server.err")"
mkfifo "$TMP/follow"
SHARDPS_REPORT_FD=3 "$BUILD/shardps-eval" --follow --servers "127.0.0.1:$port" --workers 2 --hidden 64,32 \
    --batch 32 --max-snapshots 1 --curve "$TMP/one.jsonl" 3>"$TMP/follow" 2>"$TMP/eval.err" &
evaluator=$!
read -r -t 60 line <"$TMP/follow" || { cat "$TMP/eval.err" >&2; fail "the evaluator never said it follows"; }
[ "$line" = following ] || fail "the evaluator said '$line'"
worker 1 || { cat "$TMP/w1.err" >&2; fail "worker 1 could not join or train beside the evaluator"; }
wait "$w0" || { cat "$TMP/w0.err" >&2; fail "worker 0 failed"; }
wait "$server" || { cat "$TMP/server.err" >&2; fail "the server did not exit 0"; }
grep -q "done: 20 steps" "$TMP/w1.err" || fail "worker 1 did not finish its steps"
wait "$evaluator" || { cat "$TMP/eval.err" >&2; fail "the standalone evaluator failed"; }
[ "$(wc -l <"$TMP/one.jsonl")" = 1 ] && grep -q '"step":0,"step_lo":0,"step_hi":0,"samples":0,' "$TMP/one.jsonl" ||
    fail "--max-snapshots 1 did not score the first weights once: $(cat "$TMP/one.jsonl")"
echo "PASS: an evaluator changes nothing in a sync job, tests in rank 0's place, and cannot push"

# 3. A standalone evaluator following a job to its end, in before the
# second worker as above.
mkfifo "$TMP/port3" "$TMP/follow3"
"$BUILD/shardps-server" --listen 127.0.0.1:0 --num-servers 1 --workers 2 --ready-fd 3 \
    3>"$TMP/port3" 2>"$TMP/server3.err" &
server=$!
read -r -t 30 port <"$TMP/port3" || fail "the third server did not report its port"
worker 0 &
w0=$!
wait_for_line "$TMP/server3.err" "worker 0 \\(" 60 || fail "worker 0 did not join the third server"
SHARDPS_REPORT_FD=3 "$BUILD/shardps-eval" --follow --servers "127.0.0.1:$port" --workers 2 --hidden 64,32 \
    --batch 32 --every 0.2 --curve "$TMP/end.jsonl" 3>"$TMP/follow3" 2>"$TMP/eval3.err" &
evaluator=$!
read -r -t 60 line <"$TMP/follow3" || { cat "$TMP/eval3.err" >&2; fail "the third evaluator never said it follows"; }
worker 1 || { cat "$TMP/w1.err" >&2; fail "worker 1 of the third job failed"; }
wait "$w0" || { cat "$TMP/w0.err" >&2; fail "worker 0 of the third job failed"; }
wait "$server" || { cat "$TMP/server3.err" >&2; fail "the third server did not exit 0"; }
wait "$evaluator" || { cat "$TMP/eval3.err" >&2; fail "the evaluator following to the end failed"; }
grep -q "the job's servers are gone; [1-9][0-9]* snapshots\? scored" "$TMP/eval3.err" ||
    { cat "$TMP/eval3.err" >&2; fail "the evaluator did not end with its summary"; }
! grep -q " ERROR " "$TMP/eval3.err" ||
    { cat "$TMP/eval3.err" >&2; fail "the evaluator logged errors at the normal end of the job"; }
echo "PASS: an evaluator following a job to its end ends quietly, with its summary"
