#!/usr/bin/env bash
# shardps-run, the launcher for any worker program, with a NumPy worker
# (tests/python/run_worker.py: least squares through the servers, which
# checks the environment it was given first):
#  1. 2 servers + 2 workers in sync run to the end: the workers find the job
#     in their environment (servers, rank, world size in shardps' and
#     torchrun's names, the job's options, the auth token as a file only),
#     the launcher shows one progress line per interval from their reports
#     and a summary, and the fit converges through the servers;
#  2. a worker that fails ends the job with its message and a non-zero exit;
#  3. a worker that exits 0 without leaving the job, or a command that never
#     joins it, ends the job with one line saying so; one that leaves before
#     the steps it announced is said, and the job goes on;
#  4. Ctrl-C (SIGINT to the launcher) stops the workers, then the servers,
#     and leaves no process behind;
#  5. by hand, as across hosts: servers started alone, workers with the
#     environment set by hand (docs/run.md) train to the end, the library
#     logging their progress; a worker whose server is missing fails with one
#     line naming it.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

RUN="$BUILD/shardps-run"
WORKER="$PY_TESTS/run_worker.py"
# The workers' command: Debian's Python with this build's sanitizer runtime
# (python_lib.sh); env is just another program to the launcher.
PY=(env LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 "$PYTHON")
head -c 32 /dev/urandom | base64 >"$TMP/token"
chmod 600 "$TMP/token"
job=(--chunk-bytes 4096 --optimizer sgd --lr 0.5 --momentum 0 --lr-schedule constant
    --auth-token-file "$TMP/token")
opts=(--servers 2 --workers 2 --threads 1 --steps 30 --progress-every 5 "${job[@]}")

# 1. The whole job. SHARDPS_STRAY stands for any SHARDPS_ variable of the
# launcher's own: it must not reach the workers.
SHARDPS_STRAY=1 "$RUN" "${opts[@]}" --json -- "${PY[@]}" "$WORKER" train 2 2 "$TMP/token" \
    >"$TMP/train.out" 2>"$TMP/train.err" ||
    { cat "$TMP/train.err" "$TMP/train.out" >&2; fail "the job failed"; }
for s in 5 10 15 20 25 30; do
    grep -qE "^step $s/30  loss [0-9.]+  [0-9]+ samples/s" "$TMP/train.out" ||
        { cat "$TMP/train.out" >&2; fail "no progress line for step $s"; }
done
grep -q "^shardps-run summary$" "$TMP/train.out" || fail "no summary"
grep -qE "^  steps +30 " "$TMP/train.out" || fail "the summary does not count 30 steps"
json=$(grep '^{' "$TMP/train.out")
[ "$(json_field "$json" workers_lost)" = 0 ] || fail "workers lost: $json"
[ "$(json_field "$json" steps)" = 30 ] || fail "steps: $json"
at_least "$(json_field "$json" samples_per_second)" 1 || fail "no throughput: $json"
for r in 0 1; do
    loss=$(sed -n "s/^rank $r: loss //p" "$TMP/train.out")
    [ -n "$loss" ] && ! at_least "$loss" 0.001 || fail "rank $r did not fit y = 3x + 1: loss '$loss'"
done
echo "ok: 2 servers + 2 NumPy workers, their environment checked, progress and summary shown"

# 2. A failing worker ends the job with its own message.
run_fails() { # name mode
    if "$RUN" "${opts[@]}" -- "${PY[@]}" "$WORKER" "$2" 2 2 "$TMP/token" \
        >"$TMP/$1.out" 2>"$TMP/$1.err"; then
        fail "$1: the job exited 0"
    fi
    ! grep -q "summary" "$TMP/$1.out" || fail "$1: a failed job printed a summary"
}
run_fails failing fail
grep -q "RuntimeError: rank 1 fails on purpose at step 3" "$TMP/failing.err" ||
    { cat "$TMP/failing.err" >&2; fail "the worker's own message is not shown"; }
grep -q "\[run\] worker 1 exited with status 1 (see its log above); stopping" "$TMP/failing.err" ||
    { cat "$TMP/failing.err" >&2; fail "the launcher does not say which worker failed"; }
echo "ok: a failing worker ends the job with its message"

# 3. Leaving early, or never joining, is said in one line.
run_fails early early
grep -q "\[run\] worker 1 exited (status 0) without leaving the job (the last step it reported: [0-9]*): it stopped early, or never closed its connection (shardps_close, Client.close); stopping" "$TMP/early.err" ||
    { cat "$TMP/early.err" >&2; fail "a worker that exited 0 early is not reported"; }
if "$RUN" "${opts[@]}" -- true >"$TMP/never.out" 2>"$TMP/never.err"; then
    fail "a job whose workers never joined exited 0"
fi
grep -qE "\[run\] worker [01] exited \(status 0\) without joining the job: it never connected to the servers through libshardps, which tells the launcher \(SHARDPS_REPORT_FD\); stopping" "$TMP/never.err" ||
    { cat "$TMP/never.err" >&2; fail "a worker that never joined is not reported"; }
echo "ok: a worker that exits 0 early or never joins fails the job, saying so"
# One that leaves well but before the length it announced (early stopping,
# or a loop that ends too soon) does not fail the job, and is said.
"$RUN" "${opts[@]}" -- "${PY[@]}" "$WORKER" short 2 2 "$TMP/token" >"$TMP/short.out" \
    2>"$TMP/short.err" || { cat "$TMP/short.err" >&2; fail "short: the job failed"; }
grep -q "\[run\] worker 1 left the job at step 3 of the 30 it announced" "$TMP/short.err" ||
    { cat "$TMP/short.err" >&2; fail "a worker that stopped before its last step is not said"; }
echo "ok: a worker that stops before the steps it announced is said"

# 4. Ctrl-C: the workers train until stopped.
"$RUN" "${opts[@]}" -- "${PY[@]}" "$WORKER" forever 2 2 "$TMP/token" \
    >"$TMP/int.out" 2>"$TMP/int.err" &
pid=$!
wait_for_line "$TMP/int.out" "^step 10/" 120 || { cat "$TMP/int.err" >&2; fail "no progress to step 10"; }
mapfile -t children < <(pgrep -P "$pid")
[ "${#children[@]}" = 4 ] || fail "expected 2 servers and 2 workers, found: ${children[*]}"
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" = 130 ] || { cat "$TMP/int.err" >&2; fail "the interrupted launcher exited $rc, not 130"; }
for c in "${children[@]}"; do
    wait_gone "$c" 10 || fail "process $c outlived the launcher"
done
grep -q "received SIGINT; stopping the workers at a step boundary, then the servers" "$TMP/int.err" ||
    fail "the launcher did not say how it stops"
echo "ok: Ctrl-C stops the workers and the servers, leaving no process"

# 5. By hand: each server alone, each worker with the job in its environment.
n_started=0
start_server() { # index: its port in $port, its pid in $spid
    n_started=$((n_started + 1))
    mkfifo "$TMP/port.$n_started"
    "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index "$1" --num-servers 2 \
        --workers 2 "${job[@]}" 3>"$TMP/port.$n_started" 2>"$TMP/hand-server.$n_started.err" &
    spid=$!
    read -r port <"$TMP/port.$n_started"
}
start_server 0
p0=$port s0=$spid
start_server 1
s1=$spid
servers="127.0.0.1:$p0,127.0.0.1:$port"
by_hand() { # rank servers out: one worker as docs/run.md starts it
    SHARDPS_SERVERS=$2 SHARDPS_WORKERS=2 SHARDPS_RANK=$1 RANK=$1 LOCAL_RANK=$1 WORLD_SIZE=2 \
        LOCAL_WORLD_SIZE=2 SHARDPS_AUTH_TOKEN_FILE="$TMP/token" SHARDPS_CHUNK_BYTES=4096 \
        SHARDPS_STEPS=20 SHARDPS_PROGRESS_EVERY=5 SHARDPS_CONNECT_TIMEOUT=2 \
        "${PY[@]}" "$WORKER" train 2 2 "$TMP/token" >"$3" 2>&1
}
by_hand 1 "$servers" "$TMP/hand.1" &
w1=$!
by_hand 0 "$servers" "$TMP/hand.0" || { cat "$TMP/hand.0" >&2; fail "by hand: worker 0 failed"; }
wait $w1 || { cat "$TMP/hand.1" >&2; fail "by hand: worker 1 failed"; }
wait $s0 && wait $s1 || fail "by hand: a server failed"
for r in 0 1; do
    grep -qE "\[worker $r\] step 20/20 loss [0-9.]+ [0-9]+ samples/s" "$TMP/hand.$r" ||
        { cat "$TMP/hand.$r" >&2; fail "by hand: worker $r logged no progress"; }
    loss=$(sed -n "s/^rank $r: loss //p" "$TMP/hand.$r")
    [ -n "$loss" ] && ! at_least "$loss" 0.001 || fail "by hand: rank $r did not fit: '$loss'"
done
grep -q "summary: clock 20," "$TMP/hand-server.1.err" || fail "by hand: server 0 did not end at clock 20"
echo "ok: by hand, servers and workers started separately train to the end"

# A missing server: server 1's address is the one just gone.
start_server 0
gone=127.0.0.1:${servers##*:}
if by_hand 0 "127.0.0.1:$port,$gone" "$TMP/missing"; then
    fail "a worker whose server is missing exited 0"
fi
tail -n 1 "$TMP/missing" | grep -q "ShardpsError: cannot join the job: cannot reach server 1 at $gone: connection refused" ||
    { cat "$TMP/missing" >&2; fail "a missing server is not named in one line"; }
echo "ok: a missing server is named in one line"
echo "PASS: shardps-run and the by-hand job"
