#!/usr/bin/env bash
# What an operator sees when something is off (issue 16):
# - the launcher's children die with it, even when it is killed with SIGKILL;
# - a worker waiting for a server that is not there says so every few
#   seconds, with the time it has left;
# - a worker asking for a rank another worker holds is refused at once;
# - every address that does not parse says what is wrong with it, and a
#   server list written with spaces is refused naming the cluster file line.
source "$(dirname "$0")/lib.sh"
SERVER="$BUILD/shardps-server"
WORKER="$BUILD/shardps-worker"

# 1. kill -9 of the launcher: its 2 servers and 2 workers exit promptly.
# The job is far longer than the test; the first progress line says every
# process is running.
"$CLUSTER" --servers 2 --workers 2 --hidden 32 --batch 16 --epochs 100 --progress-every 5 \
    --connect-timeout 600 >"$TMP/out" 2>"$TMP/err" &
launcher=$!
trap 'kill -9 $launcher 2>/dev/null || true; rm -rf "$TMP"' EXIT
wait_for_line "$TMP/out" '^epoch 1/100' 120 || { cat "$TMP/err" >&2; fail "the job never started"; }
mapfile -t children < <(pgrep -P "$launcher")
[ "${#children[@]}" -eq 4 ] || fail "expected 4 children of the launcher, found ${#children[@]}"
kill -9 "$launcher"
wait "$launcher" 2>/dev/null || true
for pid in "${children[@]}"; do
    wait_gone "$pid" 30 || fail "child $pid ($(cat /proc/"$pid"/comm 2>/dev/null)) outlived the launcher"
done
echo "ok: the launcher's 4 children exited after it was killed with SIGKILL"

# 1b. The same end, made certain: a worker learns of its SIGTERM only after
# its server has gone (it was stopped meanwhile, the signal pending), in the
# middle of a step the server could not finish (the other worker is stopped
# for good). It must end, not try to reconnect for the whole
# --connect-timeout, longer than this test waits for it.
mkfifo "$TMP/ready1"
timeout --foreground -k 5 120 "$SERVER" --listen 127.0.0.1:0 --workers 2 --ready-fd 3 \
    3>"$TMP/ready1" 2>"$TMP/s1.err" &
server=$!
read -r -t 60 port <"$TMP/ready1" || { cat "$TMP/s1.err" >&2; fail "the server reported no port"; }
for r in 0 1; do
    "$WORKER" --servers "127.0.0.1:$port" --workers 2 --rank $r --hidden 32 --batch 16 \
        --epochs 100 --no-eval --connect-timeout 600 --progress-every 5 2>"$TMP/w$r.err" &
    eval "w$r=\$!"
done
trap 'kill -9 $server $w0 $w1 2>/dev/null || true; rm -rf "$TMP"' EXIT
wait_for_line "$TMP/w0.err" "epoch 1/100" 60 || { cat "$TMP/w0.err" >&2; fail "the job never trained"; }
kill -STOP "$w1" "$w0"
kill -TERM "$server"
wait "$server" 2>/dev/null || true
kill -TERM "$w0"
kill -CONT "$w0"
wait_gone "$w0" 60 || fail "a stopped worker whose server left did not end"
wait "$w0" && fail "the stopped worker exited 0" || true
kill -9 "$w1"
grep -q "on SIGTERM" "$TMP/w0.err" || { cat "$TMP/w0.err" >&2; fail "the worker did not say it stopped on SIGTERM"; }
echo "ok: a worker told to stop after its server left ends at once"

# 2. A worker waiting for a server nobody runs logs its wait at the start
# and again a few seconds later, each time with the seconds left. It says so
# at the first attempt and at the first one at least 5 s after the last line;
# it tries about once a second and gives up at the attempt whose next retry
# would pass the connect timeout. With 12 s, attempts between 5 and 11 s
# (a window of 6 s: late wake-ups under load cannot skip it, as they could
# one of 1 s with 7) make a second line certain, and a fourth would need 15 s.
set +e
timeout -k 2 60 "$WORKER" --servers 127.0.0.1:1 --workers 1 --steps 1 --no-eval \
    --connect-timeout 12 2>"$TMP/wait.err"
rc=$?
set -e
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "the waiting worker exited with $rc"
n=$(grep -c "waiting for server 0 at 127.0.0.1:1 ([0-9]* s left)" "$TMP/wait.err" || true)
[ "$n" -ge 2 ] && [ "$n" -le 3 ] ||
    { cat "$TMP/wait.err" >&2; fail "expected 2 or 3 'waiting for server' lines in 12 s, got $n"; }
echo "ok: the waiting worker said so $n times in 12 s"

# 3. A second worker asking for a live rank is refused at once, naming the
# reason, not after its 600 s connect timeout (stopped at 60 s, time enough
# for a sanitizer build to start on a loaded machine).
mkfifo "$TMP/ready"
timeout --foreground -k 5 120 "$SERVER" --listen 127.0.0.1:0 --workers 2 --ready-fd 3 \
    3>"$TMP/ready" 2>"$TMP/server.err" &
server=$!
trap 'kill -9 $server $first 2>/dev/null || true; rm -rf "$TMP"' EXIT
read -r -t 60 port <"$TMP/ready" || { cat "$TMP/server.err" >&2; fail "the server reported no port"; }
# It waits for a rank 1 that never comes: its connect timeout must outlast
# the test, or it gives up before the check that it is still there.
timeout -k 2 120 "$WORKER" --servers "127.0.0.1:$port" --workers 2 --rank 0 --hidden 32 --steps 5 \
    --no-eval --connect-timeout 600 2>"$TMP/first.err" &
first=$!
wait_for_line "$TMP/server.err" "worker 0 .* joined" 60 || fail "worker 0 never joined"
set +e
timeout -k 2 60 "$WORKER" --servers "127.0.0.1:$port" --workers 2 --rank 0 --hidden 32 --steps 5 \
    --no-eval --connect-timeout 600 2>"$TMP/second.err"
rc=$?
set -e
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the second rank 0 waited instead of being refused"
[ "$rc" -ne 0 ] || fail "the second rank 0 was admitted"
grep -q "another worker already holds rank 0" "$TMP/second.err" ||
    { cat "$TMP/second.err" >&2; fail "the second rank 0 did not say why it was refused"; }
kill -0 "$first" || fail "the first worker died when a second asked for its rank"
echo "ok: $(grep "already holds rank" "$TMP/second.err" | head -n 1 | cut -d' ' -f5-)"
kill "$first" "$server" 2>/dev/null || true
wait "$first" "$server" 2>/dev/null || true

# 4. Addresses that do not parse: each program says what is wrong.
# expect_usage WANT CMD...: CMD exits 2 (or 1 after logging) with WANT in its output.
expect_error() {
    local want=$1 rc
    shift
    set +e
    timeout -k 2 60 "$@" >"$TMP/addr.out" 2>&1
    rc=$?
    set -e
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "$* exited with $rc"
    grep -q -- "$want" "$TMP/addr.out" || { cat "$TMP/addr.out" >&2; fail "$*: no '$want'"; }
    echo "ok: $(grep -- "$want" "$TMP/addr.out" | head -n 1)"
}
expect_error "'127.0.0.1' has no port" "$WORKER" --servers 127.0.0.1 --workers 1
expect_error "':99999' has no host" "$WORKER" --servers :99999 --workers 1
expect_error "port 99999 is out of range 1..65535" "$WORKER" --servers 127.0.0.1:99999 --workers 1
expect_error "host 'no-such-host.invalid' not found" "$WORKER" --servers no-such-host.invalid:7000 \
    --workers 1 --no-eval --steps 1
expect_error "'127.0.0.1' has no port" "$SERVER" --listen 127.0.0.1
expect_error "port 70000 is out of range 0..65535" "$SERVER" --listen 127.0.0.1:70000
expect_error "host 'no-such-host.invalid' not found" "$SERVER" --listen no-such-host.invalid:0

# A list written with spaces in a cluster file: refused by server and worker
# alike before anything starts, naming the file and line.
printf '[cluster]\nworkers = 1\nservers = 127.0.0.1:7000 127.0.0.1:7001\n' >"$TMP/spaces.ini"
expect_error "from $TMP/spaces.ini:3): entry 0 '127.0.0.1:7000 127.0.0.1:7001' contains a space" \
    "$WORKER" --cluster "$TMP/spaces.ini"
expect_error "from $TMP/spaces.ini:3): entry 0 '127.0.0.1:7000 127.0.0.1:7001' contains a space" \
    "$SERVER" --cluster "$TMP/spaces.ini"
echo "PASS: children die with the launcher; waits, taken ranks and bad addresses are explained"
