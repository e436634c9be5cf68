#!/usr/bin/env bash
# Authentication with a shared token: a cluster whose servers and workers all
# hold it trains; a worker with the wrong token, or with none, is refused and
# learns nothing about the model; a worker that holds a token refuses a server
# that cannot prove it has the same one.
source "$(dirname "$0")/lib.sh"

printf 'correct horse battery staple\n' >"$TMP/token"
printf 'a different secret entirely\n' >"$TMP/wrong"
chmod 600 "$TMP/token" "$TMP/wrong"

"$CLUSTER" --servers 2 --workers 2 --steps 60 --progress-every 30 --auth-token-file "$TMP/token" \
    --json >"$TMP/ok.out" 2>"$TMP/ok.err" || { cat "$TMP/ok.err" >&2; fail "authenticated cluster failed"; }

# A FIFO named as the token file (issue 34 point 10) is refused at once,
# with one line, by everything that reads the token; it used to block each
# of them in open(2) until a writer came (never: "timeout" is the bound).
mkfifo "$TMP/token.fifo"
refuses_fifo() { # program args...
    local rc=0
    timeout 30 "$BUILD/$1" --auth-token-file "$TMP/token.fifo" "${@:2}" >/dev/null \
        2>"$TMP/fifo.err" || rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "$1 with a FIFO as its token file: exit $rc"
    grep -q "token.fifo: the auth token file must be a regular file; it is a FIFO" "$TMP/fifo.err" ||
        { cat "$TMP/fifo.err" >&2; fail "$1: no line naming the FIFO"; }
}
refuses_fifo shardps-run --check -- true
refuses_fifo shardps-server --listen 127.0.0.1:0 --workers 1
refuses_fifo shardps-worker --servers 127.0.0.1:1 --steps 1

# A failed check must not leave a server waiting for workers that never come.
server=
trap 'if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi; rm -rf "$TMP"' EXIT
start_server() { # token-args...
    mkfifo "$TMP/port.$$.$1"
    "$BUILD/shardps-server" --listen 127.0.0.1:0 --workers 1 --ready-fd 3 "${@:2}" \
        3>"$TMP/port.$$.$1" 2>"$TMP/server.$1.err" &
    server=$!
    read -r port <"$TMP/port.$$.$1"
}
worker() { # name token-args...
    local name=$1
    shift
    "$BUILD/shardps-worker" --servers "127.0.0.1:$port" --steps 5 --no-eval --connect-timeout 5 \
        "$@" 2>"$TMP/$name.err"
}

start_server a --auth-token-file "$TMP/token"
worker wrong --auth-token-file "$TMP/wrong" && fail "a worker with the wrong token was admitted"
grep -q "could not prove it holds our auth token" "$TMP/wrong.err" ||
    { cat "$TMP/wrong.err" >&2; fail "wrong token: no clear refusal"; }
worker none && fail "a worker without a token was admitted"
grep -q "requires authentication; start the worker with --auth-token-file" "$TMP/none.err" ||
    { cat "$TMP/none.err" >&2; fail "no token: no clear refusal"; }
grep -q "model\|784" "$TMP/none.err" "$TMP/wrong.err" && fail "a refused peer was told about the model"
worker good --auth-token-file "$TMP/token" || { cat "$TMP/good.err" >&2; fail "good worker refused"; }
wait "$server" || fail "authenticating server failed"

# A worker with a token against a server without one: the server cannot prove
# itself, so the worker is refused (a server that welcomed it anyway would be
# refused by the worker: lying_server.sh and the fuzzers' client).
start_server b
worker noproof --auth-token-file "$TMP/token" && fail "worker trusted an unauthenticated server"
grep -q "does not authenticate" "$TMP/noproof.err" ||
    { cat "$TMP/noproof.err" >&2; fail "unauthenticated server: no clear refusal"; }
kill -TERM "$server"
wait "$server" || fail "plain server did not stop cleanly"
echo "PASS: authentication admits holders of the token and refuses everyone else"
