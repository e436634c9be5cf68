#!/usr/bin/env bash
# A mis-described cluster fails fast and says what is wrong; nothing hangs.
# A server reads its cluster file; workers get files with one mistake each:
# a port where nobody listens, the wrong worker count, another model. Each
# worker must exit non-zero well within its bound with a message naming the
# problem (a rejected worker at once, not after its connect timeout, and
# stating its own settings and their sources beside the server's), the
# server must log each refusal and still stop cleanly on SIGTERM. Mistakes
# caught before any connection (a server index missing from the file, a rank
# out of range, a misspelt key) exit 2 with one line naming the source, and
# --check refuses each with the same line.
source "$(dirname "$0")/lib.sh"
SERVER="$BUILD/shardps-server"
WORKER="$BUILD/shardps-worker"

# The server's view: one server, two workers (the model is the workers' to
# declare; a server reading a shared file skips [model] keys it does not
# take). Port 0 and an explicit --listen let the OS pick the port; the
# workers' files name it.
cat >"$TMP/server.ini" <<EOF
[cluster]
servers = 127.0.0.1:0
workers = 2
[model]
hidden = 32
EOF
mkfifo "$TMP/ready"
# --foreground: our SIGTERM reaches the server once (see netns_lib.sh).
timeout --foreground -k 5 120 "$SERVER" --cluster "$TMP/server.ini" --listen 127.0.0.1:0 --ready-fd 3 \
    3>"$TMP/ready" 2>"$TMP/server.err" &
server=$!
trap 'kill $server 2>/dev/null || true; rm -rf "$TMP"' EXIT
read -r -t 60 port <"$TMP/ready" || { cat "$TMP/server.err" >&2; fail "the server reported no port"; }

# worker_file NAME SERVERS WORKERS HIDDEN: a worker's cluster file.
worker_file() {
    printf '[cluster]\nservers = %s\nworkers = %s\n[model]\nhidden = %s\n' "$2" "$3" "$4" \
        >"$TMP/$1.ini"
}

# expect_worker_fails NAME LIMIT WANT [ARGS...]: the worker with NAME's file
# exits non-zero before LIMIT seconds (timeout's 124 means it hung) and its
# log contains WANT.
expect_worker_fails() {
    local name=$1 limit=$2 want=$3 rc
    shift 3
    set +e
    timeout -k 2 "$limit" "$WORKER" --cluster "$TMP/$name.ini" --rank "${RANK:-0}" --steps 1 --no-eval "$@" \
        >/dev/null 2>"$TMP/$name.err"
    rc=$?
    set -e
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "$name: the worker hung (killed after $limit s)"
    [ "$rc" -ne 0 ] || fail "$name: the worker succeeded"
    grep -q -- "$want" "$TMP/$name.err" || { cat "$TMP/$name.err" >&2; fail "$name: no '$want'"; }
    echo "ok: $name: $(grep -- "$want" "$TMP/$name.err" | head -n 1)"
}

# Wrong port: nobody listens on port 1; the worker gives up after its
# connect timeout and names the address.
worker_file wrong_port 127.0.0.1:1 2 32
expect_worker_fails wrong_port 60 "cannot reach server 0 at 127.0.0.1:1" --connect-timeout 1.5

# Wrong worker count and another model: refused at the handshake, so these
# exit long before their 600 s connect timeout would (stopped at 60 s, time
# enough for a sanitizer build to start on a loaded machine). The server learns the
# model from rank 0 (a table only other ranks declared gives way to rank
# 0's): a good rank 0 joins first (and waits for rank 1), then a rank 1
# with another model is refused.
worker_file wrong_workers "127.0.0.1:$port" 3 32
expect_worker_fails wrong_workers 60 "workers: 3 on the worker, 2 on this server" --connect-timeout 600
worker_file good "127.0.0.1:$port" 2 32
# It waits for a rank 1 that never comes: its connect timeout must outlast
# the test, or it gives up and leaves mid-way.
"$WORKER" --cluster "$TMP/good.ini" --rank 0 --steps 1 --no-eval --connect-timeout 600 \
    2>"$TMP/good.err" &
good=$!
trap 'kill $good $server 2>/dev/null || true; rm -rf "$TMP"' EXIT
wait_for_line "$TMP/server.err" "worker 0 .* joined" 60 || fail "the good worker never joined"
worker_file wrong_model "127.0.0.1:$port" 2 64
RANK=1 expect_worker_fails wrong_model 60 \
    "model mismatch: tensor fc1.weight: 64x784 from the worker, 32x784 on this server" \
    --connect-timeout 600
# SIGKILL: a worker still waiting for its job to start takes SIGTERM as a
# request to stop after its next step, which never comes.
kill -KILL "$good"
wait "$good" 2>/dev/null || true

# A refused worker also says what it runs and where each value came from,
# so the reader can tell which side to fix.
grep -q -- "this worker has .*--workers 3 (from $TMP/wrong_workers.ini:3)" "$TMP/wrong_workers.err" ||
    { cat "$TMP/wrong_workers.err" >&2; fail "wrong_workers: the worker did not state its own side"; }
grep -q -- "this worker has --hidden 64 (from $TMP/wrong_model.ini:5)" "$TMP/wrong_model.err" ||
    { cat "$TMP/wrong_model.err" >&2; fail "wrong_model: the worker did not state its own side"; }

# The server logged every refusal, and is still serving.
for want in "workers: 3 on the worker" "tensor fc1.weight: 64x784 from the worker"; do
    grep -q "closing .*: .*$want" "$TMP/server.err" ||
        { cat "$TMP/server.err" >&2; fail "the server did not log the refusal '$want'"; }
done
kill -0 "$server" || fail "the server died after refusing workers"
kill -TERM "$server"
wait "$server" || { rc=$?; cat "$TMP/server.err" >&2; fail "the server did not stop cleanly on SIGTERM (exit $rc)"; }

# Mistakes found before connecting: one line, exit 2, naming where each
# conflicting value came from.
expect_usage() { # want command...
    local want=$1 rc
    shift
    set +e
    timeout 60 "$@" >/dev/null 2>"$TMP/usage.err"
    rc=$?
    set -e
    [ "$rc" -eq 2 ] || { cat "$TMP/usage.err" >&2; fail "'$*' exited $rc, not 2"; }
    [ "$(wc -l <"$TMP/usage.err")" -eq 1 ] || { cat "$TMP/usage.err" >&2; fail "'$*': more than one line"; }
    grep -q -- "$want" "$TMP/usage.err" || { cat "$TMP/usage.err" >&2; fail "'$*': no '$want'"; }
    same_with_check "$TMP/usage.err" 2 "$@"
    echo "ok (and with --check): $(cat "$TMP/usage.err")"
}
expect_usage "server-index 1 (from the command line) has no entry in the servers list (from $TMP/server.ini:2)" \
    "$SERVER" --cluster "$TMP/server.ini" --server-index 1
expect_usage "rank 2 must be below --workers 2 (rank from SHARDPS_RANK, workers from $TMP/wrong_model.ini:3)" \
    env SHARDPS_RANK=2 "$WORKER" --cluster "$TMP/wrong_model.ini"
printf '[cluster]\nworkers = 2\n[model]\nhiden = 32\n' >"$TMP/typo.ini"
expect_usage "$TMP/typo.ini:4: unknown key 'hiden' in \[model\]" "$WORKER" --cluster "$TMP/typo.ini"
expect_usage "cannot read the cluster file $TMP/none.ini" "$SERVER" --cluster "$TMP/none.ini"
echo "PASS: mis-described clusters fail fast, naming the problem"
