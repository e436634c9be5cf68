#!/usr/bin/env bash
# The experiment runner end to end on a small grid: four real local clusters
# (sync and async, each with and without --verbose, 2 workers, 40 steps,
# rank 0 testing every 20: --eval-every),
# then a report with a table row per run, the metrics files the launcher's
# --metrics-dir asked for, the four plots as PNG files (against epochs: the
# job's samples seen), and a note that the two sync runs' curves coincide.
# Then a grid without eval_every: an evaluator tests, no worker stops to.
# A malformed grid, an unknown key or a bad value anywhere in the grid is
# refused before anything runs, --dry-run included (a grid pointing at no
# data too: --check reads it); a grid whose every run fails writes no plot.
source "$(dirname "$0")/lib.sh"
command -v gnuplot >/dev/null || fail "gnuplot is missing; deploy/install-deps.sh installs gnuplot-nox"
RUNNER="$BUILD/shardps-experiment"

cat >"$TMP/grid" <<'GRID'
# two modes, everything else fixed
mode = sync, async
verbose = 0, 1  # changes nothing a curve shows
workers = 2
servers = 1
steps = 40     # a short run
batch = 32
eval_every = 20
progress_every = 10
GRID
# A relative --out, as make experiment passes.
(cd "$TMP" && "$RUNNER" --grid grid --out report >out 2>err) ||
    { cat "$TMP/out" "$TMP/err" >&2; fail "the runner failed"; }

md="$TMP/report/summary.md"
[ -f "$md" ] || fail "no summary.md"
grep -q '^| run | options | final test accuracy | time to 0.85 | time to 0.88 | samples/s | mean staleness | wall time |$' "$md" ||
    fail "summary.md has no table header"
for run in "sync verbose=0" "sync verbose=1" "async verbose=0" "async verbose=1"; do
    mode=${run% *}
    row=$(grep "^| $run | mode=$mode, ${run#* }, workers=2, servers=1, steps=40," "$md") ||
        { cat "$md" >&2; fail "no row for $run"; }
    # accuracy, two times (or not reached), samples/s, staleness, wall time
    printf '%s\n' "$row" | grep -Eq '\| 0\.[0-9]{4} \| [^|]+ \| [^|]+ \| [1-9][0-9]* \| [0-9.]+ \| [0-9.]+ s \|$' ||
        fail "malformed $run row: $row"
done
# Sync is deterministic and --verbose changes no number: the two sync runs
# are drawn on top of each other, and the report says so.
grep -q "^- Runs sync verbose=0, sync verbose=1 have the same test accuracy and loss curves" "$md" ||
    { cat "$md" >&2; fail "no note that the sync runs' curves coincide"; }
for n in 01 02 03 04; do
    for f in server-0.jsonl worker-0.jsonl worker-1.jsonl; do
        [ -s "$TMP/report/runs/$n/$f" ] || fail "run $n has no $f"
    done
    # Evaluations at steps 20 and 40, losses every 10 steps.
    [ "$(wc -l <"$TMP/report/runs/$n/acc.dat")" = 2 ] || fail "run $n: not 2 accuracy points"
    [ "$(wc -l <"$TMP/report/runs/$n/loss.dat")" = 4 ] || fail "run $n: not 4 loss points"
    # "step seconds accuracy test_loss epochs": a test loss, and epochs that
    # are samples seen: 60000 / (32 x 2) = 937 steps per epoch.
    awk '$4 + 0 <= 0 || ($5 - $1 / 937) ^ 2 > 1e-12 { exit 1 }' "$TMP/report/runs/$n/acc.dat" ||
        fail "run $n: no test loss, or epochs that are not step / 937: $(cat "$TMP/report/runs/$n/acc.dat")"
done
for p in accuracy_vs_time accuracy_vs_epoch test_loss_vs_epoch loss_vs_epoch; do
    [ "$(head -c 8 "$TMP/report/$p.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
        fail "$p.png is not a PNG"
    grep -q "$p.png" "$md" || fail "summary.md does not show $p.png"
done

# By default (no eval_every in the grid) an evaluator tests in rank 0's
# place: in this async run no worker stops to test (rank 0 tests once, after
# its last step, worker 1 never), and the test curve is the evaluator's
# snapshots, from the first weights (step 0: the last rank starts only once
# the evaluator follows), then rank 0's final test.
printf 'mode = async\nworkers = 2\nservers = 1\nsteps = 60\nbatch = 32\n' >"$TMP/evalgrid"
"$RUNNER" --grid "$TMP/evalgrid" --out "$TMP/evalgrid-report" --dry-run >"$TMP/out" 2>"$TMP/err" ||
    fail "--dry-run of the evaluator grid failed: $(cat "$TMP/err")"
grep -q -- "--evaluator DIR/evaluator.jsonl --json" "$TMP/out" || fail "--dry-run shows no evaluator: $(cat "$TMP/out")"
"$RUNNER" --grid "$TMP/evalgrid" --out "$TMP/evalgrid-report" >"$TMP/out" 2>"$TMP/err" ||
    { cat "$TMP/out" "$TMP/err" >&2; fail "the evaluator grid failed"; }
run="$TMP/evalgrid-report/runs/01"
grep -q "^Test points come from an evaluator" "$TMP/evalgrid-report/summary.md" ||
    fail "summary.md does not say the evaluator tested"
[ "$(grep -c '"event":"eval"' "$run/worker-0.jsonl")" = 1 ] && grep -q '"event":"eval".*"step":60' "$run/worker-0.jsonl" ||
    fail "rank 0 stopped to test before its last step: $(grep '"event":"eval"' "$run/worker-0.jsonl")"
! grep -q '"event":"eval"' "$run/worker-1.jsonl" || fail "worker 1 tested"
head -n 1 "$run/evaluator.jsonl" | grep -q '"event":"snapshot","step":0,' ||
    fail "the evaluator's curve does not start at the first weights: $(head -n 1 "$run/evaluator.jsonl")"
# acc.dat: every snapshot, then rank 0's final test at step 60.
[ "$(wc -l <"$run/acc.dat")" = $(($(wc -l <"$run/evaluator.jsonl") + 1)) ] ||
    fail "acc.dat is not the snapshots and the final test: $(cat "$run/acc.dat")"
[ "$(tail -n 1 "$run/acc.dat" | cut -d' ' -f1)" = 60 ] || fail "the last point is not step 60: $(cat "$run/acc.dat")"
grep -q '^| run | mode=async, workers=2, servers=1, steps=60, batch=32, progress-every=50 | 0\.[0-9]\{4\} |' "$TMP/evalgrid-report/summary.md" ||
    fail "no table row for the evaluator run: $(cat "$TMP/evalgrid-report/summary.md")"

printf 'mode = sync\nworkers\n' >"$TMP/bad"
if "$RUNNER" --grid "$TMP/bad" --out "$TMP/bad-report" >"$TMP/out" 2>"$TMP/err"; then
    fail "a grid line without '=' was accepted"
fi
grep -q 'line 2 has no "="' "$TMP/err" || fail "the error does not name the line: $(cat "$TMP/err")"
[ ! -e "$TMP/bad-report" ] || fail "a report folder was made for a bad grid"
# A key that is no shardps-cluster option is refused by name, before any run.
printf 'mode = sync\nweight_decay = 0, 0.1\nlr_sched = step\n' >"$TMP/typo"
if "$RUNNER" --grid "$TMP/typo" --out "$TMP/typo-report" >"$TMP/out" 2>"$TMP/err"; then
    fail "a grid key that is no option was accepted"
fi
grep -q "'lr-sched' is not a shardps-cluster option" "$TMP/err" || fail "the typo is not named: $(cat "$TMP/err")"
[ ! -e "$TMP/typo-report" ] || fail "a report folder was made for a grid with a typo"
# Values are checked too, by shardps-cluster --check, for every run, before
# anything runs and also for --dry-run: each bad run is named.
printf 'mode = sync, asnyc\nlr = 0.01, abc\nhidden = 32\n' >"$TMP/values"
if "$RUNNER" --grid "$TMP/values" --out "$TMP/values-report" --dry-run >"$TMP/out" 2>"$TMP/err"; then
    fail "a grid with bad values was accepted by --dry-run"
fi
for want in "run 2 (sync lr=abc): shardps-cluster: --lr: 'abc' is not a number" \
    "run 3 (asnyc lr=0.01): shardps-cluster: --mode: 'asnyc' is not a known value" \
    "run 4 (asnyc lr=abc): shardps-cluster: --mode: 'asnyc' is not a known value"; do
    grep -qF "$want" "$TMP/err" || fail "bad values: no '$want' in: $(cat "$TMP/err")"
done
! grep -q "run 1 " "$TMP/err" || fail "the good run 1 was reported as bad"
[ ! -s "$TMP/out" ] || fail "--dry-run printed runs of a grid with bad values"
[ ! -e "$TMP/values-report" ] || fail "a report folder was made for a grid with bad values"
printf 'wrokers = 2\n' >"$TMP/name"
if "$RUNNER" --grid "$TMP/name" --dry-run >"$TMP/out" 2>"$TMP/err"; then
    fail "a misspelt key was accepted by --dry-run"
fi
grep -q "'wrokers' is not a shardps-cluster option" "$TMP/err" || fail "the misspelt key is not named"

# No data where the grid points: --check reads the data, so nothing runs.
printf 'workers = 1\nservers = 1\nsteps = 5\ndata = %s/no-data\n' "$TMP" >"$TMP/nodata"
if "$RUNNER" --grid "$TMP/nodata" --out "$TMP/nodata-report" >"$TMP/out" 2>"$TMP/err"; then
    fail "a grid pointing at no data was run"
fi
grep -qF "run 1 (" "$TMP/err" && grep -qF "shardps-cluster: --data $TMP/no-data: no such folder" "$TMP/err" ||
    fail "the missing data is not named: $(cat "$TMP/err")"
[ ! -e "$TMP/nodata-report" ] || fail "a report folder was made for a grid without data"

# Every run fails where no check can tell before training (the servers
# refuse every gradient, over --max-grad-norm): a table of failures, no plot
# at all (not an empty one), and a failing exit.
printf 'workers = 1\nservers = 1\nsteps = 5\nmax_grad_norm = 1e-30\nmax_rejected_steps = 1\n' >"$TMP/failing"
if "$RUNNER" --grid "$TMP/failing" --out "$TMP/failing-report" >"$TMP/out" 2>"$TMP/err"; then
    fail "a grid whose every run failed reported success"
fi
grep -q "every run failed; no plots" "$TMP/err" || fail "no word that every run failed: $(cat "$TMP/err")"
grep -q "^| run | workers=1, servers=1, steps=5, .* | failed (exit [1-9][0-9]*) |" "$TMP/failing-report/summary.md" ||
    fail "the failed run is not in the table"
grep -q "No run finished, so there are no plots" "$TMP/failing-report/summary.md" ||
    fail "summary.md does not say why there are no plots"
! ls "$TMP/failing-report"/*.png 2>/dev/null || fail "plots were written for a grid whose every run failed"
echo "PASS: the runner ran 4 clusters, wrote the table, 4 plots and a note; bad grids ran nothing"
