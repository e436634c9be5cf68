#!/usr/bin/env bash
# The job's life cycle with real processes (docs/reliability.md, "Job life
# cycle"):
# 1. --restore auto starts fresh on an empty directory and resumes this
#    job's newest checkpoint otherwise, both logged; a second job in the same
#    directory keeps its own checkpoints even though the first job's have
#    higher clocks, and leaves the first job's alone, named in one line;
# 2. a worker SIGKILLed mid-run that never comes back is waited for at most
#    --rejoin-timeout: the server then ends the job by itself, exits 0 and
#    its summary counts the lost worker;
# 3. a diverging run (NaN loss) and a run whose every push is refused stop
#    with one error line and a non-zero exit; the launcher's --json summary
#    counts rejected and late chunks.
source "$(dirname "$0")/lib.sh"

opts=(--servers 1 --workers 1 --batch 32 --mode sync --progress-every 10)
ckpt_of() { # log -> the files its server wrote, one per line
    sed -n 's/.*checkpoint ([a-zA-Z]*) at clock [0-9]*: \(.*\.ckpt\) in .*/\1/p' "$1"
}

# --- 1. --restore auto, and two jobs in one directory -----------------------
D="$TMP/ck"
"$CLUSTER" "${opts[@]}" --steps 60 --checkpoint-dir "$D" --checkpoint-every 10 --restore auto \
    >"$TMP/a.out" 2>"$TMP/a.err" || { cat "$TMP/a.err" >&2; fail "job A with --restore auto failed"; }
grep -q -- "--restore auto: no checkpoint of this job in $D; starting fresh" "$TMP/a.err" ||
    fail "job A did not say it starts fresh"
ls "$D"/server-0-clock-000000000060.ckpt >/dev/null || fail "job A left no checkpoint at 60"
# Job B differs in one setting: its checkpoints (clocks 10, 20) are lower
# than all of A's, yet they stay, and A's are not touched.
"$CLUSTER" "${opts[@]}" --seed 7 --steps 20 --checkpoint-dir "$D" --checkpoint-every 10 \
    --restore auto >"$TMP/b.out" 2>"$TMP/b.err" || { cat "$TMP/b.err" >&2; fail "job B failed"; }
grep -q "leaving 3 checkpoint files of another job alone in $D .*server-0-clock-000000000060.ckpt" \
    "$TMP/b.err" || { grep ckpt "$TMP/b.err" >&2; fail "job B did not name job A's files"; }
for f in $(ckpt_of "$TMP/b.err"); do
    [ -f "$f" ] || fail "job B's checkpoint $f was deleted (pruned against job A's clocks)"
done
[ "$(ckpt_of "$TMP/b.err" | wc -l)" -ge 2 ] || fail "job B wrote fewer than 2 checkpoints"
ls "$D"/server-0-clock-0000000000{40,50,60}.ckpt >/dev/null || fail "job B touched job A's files"
# Job A again: resumes its own newest, not B's.
"$CLUSTER" "${opts[@]}" --steps 80 --checkpoint-dir "$D" --restore auto \
    >"$TMP/a2.out" 2>"$TMP/a2.err" || { cat "$TMP/a2.err" >&2; fail "job A resumed failed"; }
grep -q "restored clock 60 from $D/server-0-clock-000000000060.ckpt" "$TMP/a2.err" ||
    fail "job A did not resume its clock 60"
# --restore alone still means "must": job C has nothing to restore.
if "$CLUSTER" "${opts[@]}" --seed 9 --steps 20 --checkpoint-dir "$D" --restore \
    >"$TMP/c.out" 2>"$TMP/c.err"; then
    fail "--restore without a checkpoint of this job succeeded"
fi
grep -q "no checkpoint of this server and job there" "$TMP/c.err" ||
    { cat "$TMP/c.err" >&2; fail "--restore did not say why it failed"; }

# --- 2. a worker lost for good ----------------------------------------------
# wait_line FILE ERE: returns once FILE has a line matching ERE (60 s at most).
wait_line() {
    timeout 60 bash -c 'until grep -Eq "$2" "$1" 2>/dev/null; do
        inotifywait -qq -t 1 -e modify "$1" 2>/dev/null || sleep 0.1; done' _ "$1" "$2"
}
job=(--workers 2 --mode sync --seed 3)
"$BUILD/shardps-server" "${job[@]}" --listen 127.0.0.1:0 --rejoin-timeout 1 \
    --heartbeat-timeout 30 >"$TMP/s.log" 2>&1 &
spid=$!
# A failed check must not leave the server, or a worker with 10 epochs to go.
wpid=()
trap 'kill "$spid" "${wpid[@]}" 2>/dev/null || true; rm -rf "$TMP"' EXIT
wait_line "$TMP/s.log" "listening on 127.0.0.1:[0-9]+" || fail "the server did not listen"
port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$TMP/s.log" | head -n 1)
# Worker 1 is killed after its first progress line: with far more steps
# than worker 0 (its 10 epochs), it cannot have finished by then however
# fast it runs.
for r in 0 1; do
    "$BUILD/shardps-worker" "${job[@]}" --batch 32 --steps $((r == 0 ? 150 : 100000)) \
        --progress-every 10 --servers "127.0.0.1:$port" --rank $r --no-eval \
        >"$TMP/w$r.log" 2>&1 &
    wpid[$r]=$!
done
wait_line "$TMP/w1.log" " step [0-9]+/[0-9]+ loss" || fail "worker 1 made no progress"
kill -9 "${wpid[1]}"
wait "${wpid[0]}" || { cat "$TMP/w0.log" >&2; fail "worker 0 did not finish after losing worker 1"; }
timeout 60 tail --pid="$spid" -f /dev/null ||
    { kill "$spid"; fail "the server still waits for worker 1 60 s after worker 0 finished"; }
wait "$spid" || fail "the server exited with $? after losing a worker"
grep -q "worker 1 left without finishing and did not rejoin within 1.0 s" "$TMP/s.log" ||
    fail "the server did not say worker 1 was lost"
grep -q "summary: .*, 1 of 2 workers lost" "$TMP/s.log" || fail "the summary does not count it"

# --- 3. failures that must stop the run --------------------------------------
if "$CLUSTER" "${opts[@]}" --optimizer sgd --lr 50 --steps 200 >"$TMP/d.out" 2>"$TMP/d.err"; then
    fail "a diverging run (sgd, lr 50) exited 0"
fi
grep -q "training diverged: the loss is \(NaN\|infinite\) at step" "$TMP/d.err" ||
    { tail -5 "$TMP/d.err" >&2; fail "the diverging run did not say why it stopped"; }
if "$CLUSTER" "${opts[@]}" --max-grad-norm 1e-12 --max-rejected-steps 5 --steps 50 \
    >"$TMP/r.out" 2>"$TMP/r.err"; then
    fail "a run whose every push was refused exited 0"
fi
grep -q "refused every chunk this worker pushed for 5 steps in a row" "$TMP/r.err" ||
    { tail -5 "$TMP/r.err" >&2; fail "the refused run did not say why it stopped"; }
"$CLUSTER" "${opts[@]}" --max-grad-norm 1e-12 --max-rejected-steps 0 --steps 4 --json \
    >"$TMP/j.out" 2>"$TMP/j.err" || { cat "$TMP/j.err" >&2; fail "the counted run failed"; }
line=$(tail -n 1 "$TMP/j.out")
rejected=$(json_field "$line" chunks_rejected)
[ -n "$rejected" ] && [ "$rejected" -gt 0 ] && [ "$(json_field "$line" chunks_late)" = 0 ] &&
    [ "$(json_field "$line" workers_lost)" = 0 ] || fail "the --json summary does not count: $line"
grep -q "not applied .* $rejected chunks rejected" "$TMP/j.out" || fail "the text summary does not count"
echo "PASS: restore auto, jobs kept apart, lost worker ends the job, failures stop the run"
