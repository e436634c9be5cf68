#!/usr/bin/env bash
# The launcher on a real terminal a person reads (issue 16): tmux gives it a
# 40-column window, then 80. While the job runs, the progress line fits the
# window with its ETA in view, and the children's log lines around it are whole;
# once it is over no cut-off copy of the progress line is left anywhere on
# the screen. Without a terminal, progress comes as plain lines. Skipped
# (77) where tmux is missing.
source "$(dirname "$0")/lib.sh"
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed"; exit 77; }

# Without a terminal: one plain line per report, no carriage return or
# escape sequence. 120 steps are one epoch of the 1875, and say so (not the
# default 10 epochs, which --steps replaces).
"$CLUSTER" --hidden 32 --batch 16 --steps 120 --progress-every 20 >"$TMP/plain.out" \
    2>"$TMP/plain.err" || { cat "$TMP/plain.err" >&2; fail "the job without a terminal failed"; }
[ "$(grep -c '^epoch 1/1  step [0-9]*/120  loss [0-9.]*  [0-9]* samples/s  ETA [0-9:-]*$' \
    "$TMP/plain.out")" -eq 6 ] || { cat "$TMP/plain.out" >&2; fail "not 6 plain progress lines"; }
! grep -q $'[\r\033]' "$TMP/plain.out" "$TMP/plain.err" ||
    fail "terminal control characters in output that is not a terminal"
echo "ok: without a terminal, 6 plain progress lines"

# On a terminal. Our own tmux server (-L), so nothing else's is touched. The
# pane's shell waits for "go" until the raw output is being recorded, then
# runs the job; afterwards it signals "done" and keeps the pane open (cat
# reads the idle terminal) for the last capture.
WIDTH=40
T=(tmux -L "shardps-test-$$" -f /dev/null)
trap '"${T[@]}" kill-server 2>/dev/null || true; rm -rf "$TMP"' EXIT
cat >"$TMP/job.sh" <<EOF
tmux -L "shardps-test-$$" wait-for go
OPENBLAS_NUM_THREADS=1 "$CLUSTER" --hidden 32 --batch 16 --epochs 2 --steps 1500 \
    --progress-every 10 --eval-every 250
echo "launcher exit \$?"
tmux -L "shardps-test-$$" wait-for -S done
exec cat
EOF
"${T[@]}" new-session -d -s job -x "$WIDTH" -y 50 "bash $TMP/job.sh"
"${T[@]}" pipe-pane -t job -o "cat >>$TMP/raw"
"${T[@]}" wait-for -S go

# progress_on_screen COLUMNS: the progress line as the screen shows it, once
# a redraw with an ETA has gone out (a capture can fall between clearing the
# line and drawing it again, so take another after the next draw, a bounded
# number of times); checks there is one, with the ETA first, and that it fits.
progress_on_screen() {
    local try
    shown=""
    for try in 1 2 3 4 5 6 7 8 9 10; do
        : >"$TMP/raw"
        wait_for_line "$TMP/raw" "ETA [0-9]+:[0-9]{2}" 120 || fail "no progress line with an ETA was drawn"
        "${T[@]}" capture-pane -p -t job >"$TMP/screen"
        # 1500 steps end inside the first of --epochs 2: the run has 1 epoch.
        shown=$(grep -E '^ETA [0-9]+:[0-9]{2}  epoch 1/1' "$TMP/screen" || true)
        [ -n "$shown" ] && break
    done
    [ -n "$shown" ] || { cat "$TMP/screen" >&2; fail "no progress line on the screen in 10 captures"; }
    [ "$(printf '%s\n' "$shown" | wc -l)" -eq 1 ] ||
        { cat "$TMP/screen" >&2; fail "more than one progress line on the screen"; }
    [ "${#shown}" -lt "$1" ] || fail "the progress line is ${#shown} columns in a $1-column window"
    echo "ok: while running in $1 columns: '$shown'"
}
progress_on_screen "$WIDTH"
# The window widens (SIGWINCH): the launcher reads the new width, and the
# next lines use it, showing the fields that did not fit before.
"${T[@]}" resize-window -t job -x 80
progress_on_screen 80
[ "${#shown}" -gt 40 ] || fail "after widening to 80 columns the line is still ${#shown} columns: '$shown'"

"${T[@]}" wait-for done
"${T[@]}" capture-pane -p -J -t job -S - >"$TMP/final"
grep -q "^launcher exit 0$" "$TMP/final" || { cat "$TMP/final" >&2; fail "the job failed"; }
# No copy of the progress line is left: it is cleared before every other
# line and at the end.
! grep -E 'ETA|\[[#.]{5,}' "$TMP/final" ||
    { cat "$TMP/final" >&2; fail "a cut-off progress line was left on the screen"; }
# Every log line on the screen is whole: it starts with its time and ends
# where the launcher or a child ended it (no progress text glued to it).
bad=$(grep -E '^[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} ' "$TMP/final" | grep -E 'samples/s  |epoch [0-9]+/' ||
    true)
[ -z "$bad" ] || fail "log lines with progress text in them: $bad"
grep -q "test accuracy" "$TMP/final" || fail "no accuracy line on the screen"
grep -q "^shardps-cluster summary$" "$TMP/final" || fail "no summary on the screen"
echo "PASS: a 40- then 80-column terminal shows one whole progress line with its ETA, and no debris"
