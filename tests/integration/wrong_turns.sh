#!/usr/bin/env bash
# A newcomer's wrong turns end at once, each with one clear line (issue 21):
# 1. a worker pointed at an HTTP port says the address is not a shardps
#    server at its first answer (or its silent close), rather than reporting
#    a 1.3 GB frame header or retrying for its connect timeout;
# 2. shardps-top takes its endpoints before or after its options;
# 3. Ctrl-C (SIGINT) or SIGTERM ends a worker that waits on its servers
#    promptly, with one line and the signal's exit status: while it retries
#    a server nobody runs, and while the job waits for a worker that never
#    comes. Each worker's connect timeout (600 s) is far longer than the
#    test waits for it.
source "$(dirname "$0")/lib.sh"
SERVER="$BUILD/shardps-server"
WORKER="$BUILD/shardps-worker"
TOP="$BUILD/shardps-top"

pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null || true; rm -rf "$TMP"' EXIT

# A server for 2 workers, of which only one ever comes, with its metrics
# endpoint (libmicrohttpd) on an OS-chosen port.
mkfifo "$TMP/ready"
"$SERVER" --listen 127.0.0.1:0 --workers 2 --metrics-port 0 --ready-fd 3 3>"$TMP/ready" \
    2>"$TMP/server.err" &
pids+=($!)
read -r -t 60 port <"$TMP/ready" || { cat "$TMP/server.err" >&2; fail "the server reported no port"; }
mport=$(sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$TMP/server.err")
[ -n "$mport" ] || { cat "$TMP/server.err" >&2; fail "the server logged no metrics port"; }

# one_error FILE: the failure took exactly one line.
one_error() {
    [ "$(grep -c " ERROR " "$1")" -eq 1 ] || { cat "$1" >&2; fail "$1: not exactly one ERROR line"; }
}

# worker_at ADDR NAME WANT: a worker pointed at ADDR, which is no shardps
# server, fails at once (well within its connect timeout) with one line
# containing WANT, without a retry.
worker_at() {
    local rc
    set +e
    timeout -k 2 60 "$WORKER" --servers "$1" --workers 1 --steps 1 --no-eval \
        --connect-timeout 600 2>"$TMP/$2.err"
    rc=$?
    set -e
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] ||
        { cat "$TMP/$2.err" >&2; fail "$2: the worker exited with $rc"; }
    grep -q -- "$3" "$TMP/$2.err" || { cat "$TMP/$2.err" >&2; fail "$2: no '$3'"; }
    one_error "$TMP/$2.err"
    ! grep -q "waiting for server" "$TMP/$2.err" || fail "$2: the worker retried"
    echo "ok: $2: $(grep " ERROR " "$TMP/$2.err" | cut -d' ' -f5-)"
}

# 1. A web server that answers what it cannot parse (Python's http.server:
# an HTML page), and the server's own metrics port (libmicrohttpd, which
# closes without a word).
python3 -u -m http.server 0 --bind 127.0.0.1 >"$TMP/http.out" 2>/dev/null &
pids+=($!)
wait_for_line "$TMP/http.out" "^Serving HTTP on 127.0.0.1 port [0-9]+" 30 ||
    fail "python3 -m http.server did not start"
hport=$(sed -n 's/^Serving HTTP on 127\.0\.0\.1 port \([0-9]*\) .*/\1/p' "$TMP/http.out")
worker_at "127.0.0.1:$hport" web \
    "server 0 (127.0.0.1:$hport) is not a shardps server: it answered like an HTTP server"
worker_at "127.0.0.1:$mport" metrics \
    "server 0 (127.0.0.1:$mport) closed the connection without answering our HELLO: another program"

# 2. shardps-top: the endpoints after the options, before them, and between.
for args in "--once 127.0.0.1:$mport" "127.0.0.1:$mport --once" \
    "--timeout 5 127.0.0.1:$mport --once --interval 1"; do
    # shellcheck disable=SC2086 # the words are the arguments
    "$TOP" $args >"$TMP/top" 2>&1 || { cat "$TMP/top" >&2; fail "shardps-top $args failed"; }
    grep -q "1/1 servers answering" "$TMP/top" || { cat "$TMP/top" >&2; fail "shardps-top $args: no answer"; }
done
set +e
"$TOP" --once 127.0.0.1:1 "127.0.0.1:$mport" >"$TMP/top" 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "two endpoint lists" "$TMP/top" ||
    { cat "$TMP/top" >&2; fail "shardps-top took two endpoint lists (exit $rc)"; }
echo "ok: shardps-top takes its endpoints anywhere among its options, once"

# stopped_by SIGNAL PID ERR WANT: PID, told SIGNAL once ERR has its
# waiting line, ends within 10 s with the signal's status and one line
# containing WANT.
stopped_by() {
    local sig=$1 pid=$2 err=$3 want=$4 rc status
    kill -"$sig" "$pid"
    wait_gone "$pid" 10 || { cat "$err" >&2; fail "a waiting worker ignored SIG$sig for 10 s"; }
    set +e
    wait "$pid"
    rc=$?
    set -e
    status=$((128 + $(kill -l "$sig")))
    [ "$rc" -eq "$status" ] || { cat "$err" >&2; fail "SIG$sig: the worker exited $rc, want $status"; }
    [ "$(grep -c "stopping on SIG$sig" "$err")" -eq 1 ] && grep -q -- "$want" "$err" ||
        { cat "$err" >&2; fail "SIG$sig: no one line saying '$want'"; }
    ! grep -q " ERROR " "$err" || { cat "$err" >&2; fail "SIG$sig: a requested stop logged an error"; }
    echo "ok: SIG$sig: $(grep "stopping on SIG$sig" "$err" | cut -d' ' -f5-)"
}

# waiting_worker ERR LINE ARGS...: a worker (its pid in $pid) of ARGS, once
# ERR has LINE.
waiting_worker() {
    local err=$1 line=$2
    shift 2
    "$WORKER" "$@" --no-eval --connect-timeout 600 2>"$err" &
    pid=$!
    pids+=("$pid")
    wait_for_line "$err" "$line" 60 || { cat "$err" >&2; fail "no '$line' from the worker"; }
}

# 3a. A worker retrying a server nobody runs (nothing listens on port 1).
waiting_worker "$TMP/retry.err" "waiting for server 0 at 127.0.0.1:1" \
    --servers 127.0.0.1:1 --workers 1 --steps 1
stopped_by INT "$pid" "$TMP/retry.err" \
    "stopped on request while waiting for server 0 (127.0.0.1:1) to accept a connection"

# 3b. A worker admitted to a job that waits for rank 1, in its first pull.
waiting_worker "$TMP/join.err" "connected to 1 server" \
    --servers "127.0.0.1:$port" --workers 2 --rank 0 --hidden 16 --batch 16 --steps 5
stopped_by TERM "$pid" "$TMP/join.err" \
    "stopped on request while waiting for server 0 (127.0.0.1:$port) to answer a pull"
kill -0 "${pids[0]}" || fail "the server died"
echo "PASS: an HTTP port, shardps-top's argument order and a stop while waiting each end in one line"
