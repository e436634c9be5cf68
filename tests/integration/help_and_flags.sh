#!/usr/bin/env bash
# Every binary answers --help, and bad flags or files get one clear line and
# a non-zero exit rather than a crash or a hang.
source "$(dirname "$0")/lib.sh"

for bin in shardps-server shardps-worker shardps-cluster; do
    "$BUILD/$bin" --help >"$TMP/help" || fail "$bin --help exited non-zero"
    grep -q "^Usage: $bin" "$TMP/help" || fail "$bin --help printed no usage"
done

expect_error() { # expected-substring command...
    local want=$1
    shift
    if "$@" >"$TMP/out" 2>"$TMP/err"; then
        fail "'$*' succeeded"
    fi
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || { cat "$TMP/err" >&2; fail "'$*' printed more than one line"; }
    grep -q -- "$want" "$TMP/err" || { cat "$TMP/err" >&2; fail "'$*' did not mention '$want'"; }
}

expect_error "unknown option '--bogus'" "$BUILD/shardps-worker" --bogus
expect_error "accepted: sync|async|ssp" "$BUILD/shardps-cluster" --mode fast
expect_error "accepted: 1 to" "$BUILD/shardps-server" --workers 0
expect_error "is not a number" "$BUILD/shardps-server" --lr fast
expect_error "needs a value" "$BUILD/shardps-worker" --rank
expect_error "must be below --workers" "$BUILD/shardps-worker" --rank 2 --workers 2
expect_error "not a list of positive sizes" "$BUILD/shardps-server" --hidden 256,,128
expect_error "SHARDPS_MODE" env SHARDPS_MODE=turbo "$BUILD/shardps-server"

# A data folder without the files: the error names the missing file.
mkdir "$TMP/nodata"
"$BUILD/shardps-worker" --data-dir "$TMP/nodata" 2>"$TMP/err" && fail "worker ran without data"
grep -q "$TMP/nodata/train-[a-z]*-idx[13]-ubyte" "$TMP/err" || { cat "$TMP/err" >&2; fail "missing data file not named"; }

# A worker pointed at a port where nobody listens gives up after its timeout
# and names the address.
"$BUILD/shardps-worker" --servers 127.0.0.1:1 --connect-timeout 0.3 2>"$TMP/err" &&
    fail "worker succeeded without a server"
grep -q "cannot reach server 0 at 127.0.0.1:1" "$TMP/err" || { cat "$TMP/err" >&2; fail "unreachable server not named"; }
echo "PASS: help and flag errors"
