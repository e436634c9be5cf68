#!/usr/bin/env bash
# Every binary answers --help, and bad flags or files get one clear line and
# a non-zero exit rather than a crash or a hang.
source "$(dirname "$0")/lib.sh"

for bin in shardps-server shardps-worker shardps-cluster; do
    "$BUILD/$bin" --help >"$TMP/help" || fail "$bin --help exited non-zero"
    grep -q "^Usage: $bin" "$TMP/help" || fail "$bin --help printed no usage"
done

# ... and --check refuses it alike (same status, same line).
expect_error() { # expected-substring command...
    local want=$1 rc=0
    shift
    "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
    [ "$rc" -ne 0 ] || fail "'$*' succeeded"
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || { cat "$TMP/err" >&2; fail "'$*' printed more than one line"; }
    grep -q -- "$want" "$TMP/err" || { cat "$TMP/err" >&2; fail "'$*' did not mention '$want'"; }
    same_with_check "$TMP/err" "$rc" "$@"
}

expect_error "unknown option '--bogus'" "$BUILD/shardps-worker" --bogus
expect_error "accepted: sync|async|ssp" "$BUILD/shardps-cluster" --mode fast
expect_error "accepted: 1 to" "$BUILD/shardps-server" --workers 0
expect_error "is not a number" "$BUILD/shardps-server" --lr fast
expect_error "needs a value" "$BUILD/shardps-worker" --rank
expect_error "must be below --workers" "$BUILD/shardps-worker" --rank 2 --workers 2
expect_error "not a list of positive sizes" "$BUILD/shardps-worker" --hidden 256,,128
# Servers hold whatever tensors the workers declare: no model options.
expect_error "unknown option '--hidden'" "$BUILD/shardps-server" --hidden 256,128
expect_error "SHARDPS_MODE" env SHARDPS_MODE=turbo "$BUILD/shardps-server"

# The values the README shows for defaults are accepted, and shown back.
for bin in shardps-server shardps-cluster; do
    "$BUILD/$bin" --sync-quorum all --apply-threads auto --heartbeat-timeout off --print-config \
        >"$TMP/cfg" 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "$bin refused all/auto/off"; }
    grep -q "^sync-quorum *= all " "$TMP/cfg" && grep -q "^apply-threads *= auto " "$TMP/cfg" ||
        { cat "$TMP/cfg" >&2; fail "$bin --print-config does not show all/auto"; }
done
"$BUILD/shardps-worker" --clip-norm off --print-config | grep -q "^clip-norm *= off " ||
    fail "the worker does not take --clip-norm off"
expect_error "accepted: 0 to 64 or auto" "$BUILD/shardps-server" --apply-threads many

# The launcher takes every job option the servers and workers take (one
# table), so none can be unreachable from it.
"$BUILD/shardps-cluster" --help >"$TMP/lhelp"
for bin in shardps-server shardps-worker; do
    "$BUILD/$bin" --print-config | sed -n 's/^\([a-z0-9-]*\) *=.*/\1/p' >"$TMP/names"
    while read -r name; do
        case $name in # each program's own, per process or per program
        cluster | servers | listen | server-index | num-servers | ready-fd | metrics-file | \
            metrics-interval | linger | rank | threads | no-eval | eval-at-end | report-fd | report-steps | \
            slow-ms | parent-pid) continue ;;
        esac
        grep -q -- "^  --$name[ =]" "$TMP/lhelp" || fail "shardps-cluster has no --$name, which $bin takes"
    done <"$TMP/names"
done

# A data folder without the files: the error names the missing file, and
# --check says the same (the older name --data-dir still works).
mkdir "$TMP/nodata"
expect_error "$TMP/nodata/train-[a-z]*-idx[13]-ubyte" "$BUILD/shardps-worker" --data-dir "$TMP/nodata"
expect_error "$TMP/nodata/train-[a-z]*-idx[13]-ubyte" "$BUILD/shardps-cluster" --data "$TMP/nodata"

# A worker pointed at a port where nobody listens gives up after its timeout
# and names the address.
"$BUILD/shardps-worker" --servers 127.0.0.1:1 --connect-timeout 0.3 2>"$TMP/err" &&
    fail "worker succeeded without a server"
grep -q "cannot reach server 0 at 127.0.0.1:1" "$TMP/err" || { cat "$TMP/err" >&2; fail "unreachable server not named"; }
echo "PASS: help and flag errors"
