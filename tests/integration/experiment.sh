#!/usr/bin/env bash
# The experiment runner end to end on a small grid: two real local clusters
# (sync and async, 2 workers, 40 steps), then a report with a table row per
# run, the metrics files the launcher's --metrics-dir asked for, and the three
# plots as PNG files. A malformed grid is refused before anything runs.
source "$(dirname "$0")/lib.sh"
command -v gnuplot >/dev/null || fail "gnuplot is missing; deploy/install-deps.sh installs gnuplot-nox"
RUNNER="$BUILD/shardps-experiment"

cat >"$TMP/grid" <<'GRID'
# two modes, everything else fixed
mode = sync, async
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
for mode in sync async; do
    row=$(grep "^| $mode | mode=$mode, workers=2, servers=1, steps=40," "$md") || { cat "$md" >&2; fail "no row for $mode"; }
    # accuracy, two times (or not reached), samples/s, staleness, wall time
    printf '%s\n' "$row" | grep -Eq '\| 0\.[0-9]{4} \| [^|]+ \| [^|]+ \| [1-9][0-9]* \| [0-9.]+ \| [0-9.]+ s \|$' ||
        fail "malformed $mode row: $row"
done
for n in 01 02; do
    for f in server-0.jsonl worker-0.jsonl worker-1.jsonl; do
        [ -s "$TMP/report/runs/$n/$f" ] || fail "run $n has no $f"
    done
    # Evaluations at steps 20 and 40, losses every 10 steps.
    [ "$(wc -l <"$TMP/report/runs/$n/acc.dat")" = 2 ] || fail "run $n: not 2 accuracy points"
    [ "$(wc -l <"$TMP/report/runs/$n/loss.dat")" = 4 ] || fail "run $n: not 4 loss points"
done
for p in accuracy_vs_time accuracy_vs_step loss_vs_step; do
    [ "$(head -c 8 "$TMP/report/$p.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
        fail "$p.png is not a PNG"
    grep -q "$p.png" "$md" || fail "summary.md does not show $p.png"
done

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
echo "PASS: the runner ran 2 clusters and wrote the table and 3 plots"
