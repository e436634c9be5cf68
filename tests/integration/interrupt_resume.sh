#!/usr/bin/env bash
# Ctrl-C and resume equal an uninterrupted run, bit for bit (sync mode):
# the launcher, interrupted mid-run, stops the workers at the end of their
# step, then the servers, which checkpoint at that step boundary; a run
# resumed from those checkpoints ends with exactly the weights of a run
# never interrupted. Three times: SIGINT to the launcher alone; to its whole
# process group at once (what a terminal's Ctrl-C does; the launcher's
# children run in sessions of their own, so it still reaches only the
# launcher, which orders the stop: signalled together, a server at a step
# boundary would leave while the workers were inside the step); and
# SIGTERM to the workers alone, as `docker compose stop` does (workers
# first, since they depend on the servers; the launcher then sees them
# gone and stops the servers).
# Worker 1 is a straggler (--slow-worker 1:400, which changes nothing in
# sync mode's arithmetic): for most of every step the servers hold worker
# 0's pushes and wait for its, so an interruption lands mid-step, where a
# checkpoint taken as it stands does not resume exactly.
source "$(dirname "$0")/lib.sh"

opts=(--servers 2 --workers 2 --batch 32 --mode sync --optimizer adam --lr-schedule constant
    --progress-every 10 --apply-threads 2 --steps 40 --slow-worker 1:400)
"$CLUSTER" "${opts[@]}" --dump-weights "$TMP/whole.bin" >"$TMP/whole.out" 2>"$TMP/whole.err" ||
    { cat "$TMP/whole.err" >&2; fail "the uninterrupted run failed"; }

for trial in launcher group workers; do
    D="$TMP/ck-$trial"
    # Its own process group, so that the group can be signalled as a terminal would.
    setsid "$CLUSTER" "${opts[@]}" --checkpoint-dir "$D" >"$TMP/$trial.out" 2>"$TMP/$trial.err" &
    pid=$!
    # Step 10's line: the 30 steps left take 12 s at least (the straggler's
    # 400 ms each), so the interruption lands before the end.
    wait_for_line "$TMP/$trial.out" " step [1-3]0/40 " 120 ||
        { kill -KILL -- "-$pid"; fail "$trial: no progress past step 10"; }
    # The interruption must land inside a step, where every worker has
    # passed its stop check for the boundary behind it: worker 0 made its
    # check before reporting step 10, and worker 1 before it says it holds
    # the pushes of a later step (the straggler's 400 ms, after its check and
    # its gradients; nobody reaches the next boundary before it pushes). At
    # a boundary the workers could decide differently (docs/reliability.md).
    wait_for_line "$TMP/$trial.err" "\[worker 1\] step (1[1-9]|[23][0-9]|40): holding the pushes" 120 ||
        { kill -KILL -- "-$pid"; fail "$trial: worker 1 never held a step past 10"; }
    case $trial in
    launcher) kill -INT "$pid" ;;
    group)
        # The terminal's signal must reach the launcher alone.
        for child in $(pgrep -P "$pid"); do
            [ "$(ps -o pgid= -p "$child" | tr -d ' ')" != "$pid" ] ||
                fail "child $child is in the launcher's process group: Ctrl-C would reach it"
        done
        kill -INT -- "-$pid"
        ;;
    workers) kill -TERM $(pgrep -P "$pid" -f shardps-worker) ;;
    esac
    wait "$pid" && fail "$trial: the interrupted launcher exited 0"
    clocks=$(sed -n 's/.*\[server [01]\] checkpoint (SIG[A-Z]*) at clock \([0-9]*\).*/\1/p' \
        "$TMP/$trial.err" | sort -u)
    [ "$(wc -l <<<"$clocks")" = 1 ] && [ -n "$clocks" ] ||
        { grep -E "checkpoint|stopping|mid-step" "$TMP/$trial.err" >&2;
          fail "$trial: the servers did not both checkpoint one clock on the way down: $clocks"; }
    ! grep -q "mid-step" "$TMP/$trial.err" || fail "$trial: a checkpoint was taken mid-step"
    [ "$clocks" -lt 40 ] || fail "$trial: the run ended before it was interrupted"
    "$CLUSTER" "${opts[@]}" --checkpoint-dir "$D" --restore --dump-weights "$TMP/$trial.bin" \
        >"$TMP/$trial-resumed.out" 2>"$TMP/$trial-resumed.err" ||
        { cat "$TMP/$trial-resumed.err" >&2; fail "$trial: the resumed run failed"; }
    grep -q "\[server 0\] restored clock $clocks from" "$TMP/$trial-resumed.err" ||
        fail "$trial: server 0 did not restore clock $clocks"
    "$WDIFF" "$TMP/$trial.bin" "$TMP/whole.bin" 0 ||
        fail "$trial: interrupted at step $clocks and resumed, the run differs from the whole run"
    echo "$trial: interrupted at clock $clocks, resumed: identical"
done
echo "PASS: Ctrl-C checkpoints at a step boundary; resumed runs equal the uninterrupted one"
