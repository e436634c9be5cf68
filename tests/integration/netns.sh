#!/usr/bin/env bash
# Separate hosts, for real: every server and worker runs in its own network
# namespace with its own address, and all of them read one cluster file, as
# on a cluster of machines. Usage: netns.sh BUILD WEIGHTS_DIFF train|cut
#   train: 2 servers + 2 workers train 300 sync steps; the servers bind the
#          addresses the file gives them, and the final weights equal those
#          of the same job on one host (shardps-cluster on loopback).
#   cut:   3 workers; once worker 2 reports step 50 its link is cut (its
#          packets vanish, nobody gets a reset), the servers drop it after
#          the 5 s heartbeat timeout, the other two finish every step, and
#          the servers (still waiting for worker 2 to rejoin) stop cleanly on
#          SIGTERM.
# Needs root for ip netns; skipped (exit 77) where namespaces are not allowed.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns_lib.sh"
MODE=${3:-train}
STEPS=300
case "$MODE" in
train) W=2 ;;
cut) W=3 ;;
*) fail "unknown mode '$MODE' (train or cut)" ;;
esac
ns_setup

cat >"$TMP/cluster.ini" <<EOF
; The job, as every host sees it.
[cluster]
servers = 10.231.0.1:7000, 10.231.0.2:7000
workers = $W
mode = sync

[model]
hidden = 64

[server]
; Also how long a worker may compute without a word to the servers: its
; final evaluation takes over half a second under a sanitizer when loaded.
heartbeat-timeout = 5

[worker]
batch = 32
steps = $STEPS
progress-every = 10
EOF

for i in 0 1; do
    ns_host "s$i" "10.231.0.$((i + 1))"
done
for r in $(seq 0 $((W - 1))); do
    ns_host "w$r" "10.231.0.$((r + 11))"
done

servers=()
for i in 0 1; do
    ns_run "s$i" "$BUILD/shardps-server" --cluster "$TMP/cluster.ini" --server-index "$i" \
        2>"$TMP/s$i.err"
    servers+=("$NS_LAST")
done

workers=()
for r in $(seq 0 $((W - 1))); do
    extra=()
    [ "$r" -eq 0 ] && extra=(--dump-weights "$TMP/net.bin")
    if [ "$MODE" = cut ] && [ "$r" -eq 2 ]; then
        # Worker 2's progress comes through a FIFO, so the link is cut on its
        # own report of step 50, not after a guessed delay. Opening it
        # read-write here means the worker's open never blocks.
        mkfifo "$TMP/w2.fifo"
        exec 5<>"$TMP/w2.fifo"
        ns_run "w$r" "$BUILD/shardps-worker" --cluster "$TMP/cluster.ini" --rank "$r" \
            --report-fd 4 4>"$TMP/w2.fifo" 2>"$TMP/w$r.err"
    else
        ns_run "w$r" "$BUILD/shardps-worker" --cluster "$TMP/cluster.ini" --rank "$r" \
            --report-fd 4 "${extra[@]}" 4>"$TMP/w$r.json" 2>"$TMP/w$r.err"
    fi
    workers+=("$NS_LAST")
done

if [ "$MODE" = cut ]; then
    step=0
    while [ "$step" -lt 50 ]; do
        # The timeout only bounds a broken run; the cut follows the report.
        read -r -t 60 -u 5 line || { cat "$TMP/w2.err" >&2; fail "worker 2 reported no progress for 60 s"; }
        case "$line" in
        *'"event":"progress"'*) step=$(json_field "$line" step) ;;
        esac
    done
    ns_cut w2
    echo "cut worker 2's link after its report of step $step"
fi

for r in 0 1; do
    wait "${workers[$r]}" || { cat "$TMP/w$r.err" >&2; fail "worker $r exited non-zero"; }
    done_line=$(grep '"event":"done"' "$TMP/w$r.json") || fail "worker $r reported no summary"
    [ "$(json_field "$done_line" steps)" = "$STEPS" ] ||
        fail "worker $r did $(json_field "$done_line" steps) steps, not $STEPS: $done_line"
done
for i in 0 1; do
    if [ "$MODE" = cut ]; then
        # A server may keep waiting for a worker that left without finishing
        # to rejoin; once it has seen the others finish, stop it as an
        # operator would (if it has not exited already), which must be clean.
        for r in 0 1; do
            wait_for_line "$TMP/s$i.err" "worker $r \(.*\) left at clock $STEPS \(finished\)" 30 ||
                { cat "$TMP/s$i.err" >&2; fail "server $i did not see worker $r finish"; }
        done
        kill -TERM "${servers[$i]}" 2>/dev/null || true
    fi
    wait "${servers[$i]}" || { cat "$TMP/s$i.err" >&2; fail "server $i exited non-zero"; }
    grep -q "listening on 10.231.0.$((i + 1)):7000 " "$TMP/s$i.err" ||
        { cat "$TMP/s$i.err" >&2; fail "server $i did not bind the address the cluster file gives it"; }
done
acc=$(json_field "$(grep '"event":"done"' "$TMP/w0.json")" test_accuracy)
at_least "$acc" 0.6 || fail "accuracy $acc after $STEPS steps is too low"

if [ "$MODE" = cut ]; then
    for i in 0 1; do
        grep -q "worker 2 (10.231.0.13:[0-9]*) silent for" "$TMP/s$i.err" ||
            { cat "$TMP/s$i.err" >&2; fail "server $i did not time worker 2 out"; }
    done
    echo "PASS: worker 2's link was cut; the servers dropped it and the others finished (accuracy $acc)"
    exit 0
fi

# The same job on one host, through shardps-cluster on loopback: sync mode is
# deterministic, so separate hosts must not change a single weight.
"$CLUSTER" --servers 2 --workers 2 --mode sync --hidden 64 --batch 32 --steps "$STEPS" \
    --progress-every 100 --dump-weights "$TMP/ref.bin" --json >"$TMP/ref.out" 2>"$TMP/ref.err" ||
    { cat "$TMP/ref.err" >&2; fail "the loopback reference run failed"; }
"$WDIFF" "$TMP/net.bin" "$TMP/ref.bin" 1e-6 ||
    fail "weights trained across namespaces differ from the same job on one host"
echo "PASS: 2 servers + 2 workers on separate namespaces trained $STEPS steps (accuracy $acc), same weights as on one host"
