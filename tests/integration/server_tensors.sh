#!/usr/bin/env bash
# Servers hold tensors, not a network:
# 1. the default job's servers (2, and 4) each carry between 0.8x and 1.25x of
#    the mean bytes of weights, read from their summary lines;
# 2. a server restored from a checkpoint of the old format (version 1, which
#    held no tensor table) refuses it by name with that reason.
source "$(dirname "$0")/lib.sh"

# balanced S: a default job on S servers; every server's weight bytes are
# within [0.8, 1.25] x their mean.
balanced() {
    "$CLUSTER" --servers "$1" --workers 1 --steps 2 >"$TMP/s$1.out" 2>"$TMP/s$1.err" ||
        { cat "$TMP/s$1.err" >&2; fail "the default job on $1 servers failed"; }
    sed -n 's/.*\[server [0-9]*\] summary: .* \([0-9]*\) bytes of weights in .*/\1/p' \
        "$TMP/s$1.err" >"$TMP/s$1.bytes"
    [ "$(wc -l <"$TMP/s$1.bytes")" -eq "$1" ] ||
        { cat "$TMP/s$1.err" >&2; fail "expected $1 summary lines with the bytes carried"; }
    awk -v n="$1" '{ b[NR] = $1; sum += $1 }
        END { mean = sum / n; total = 0
              for (i = 1; i <= n; i++) {
                  printf "server %d carries %d bytes (%.3f x the mean)\n", i - 1, b[i], b[i] / mean
                  if (b[i] < 0.8 * mean || b[i] > 1.25 * mean) bad = 1
              }
              exit bad }' "$TMP/s$1.bytes" || fail "the servers' bytes are not balanced"
    # Together they hold the whole default model (784-256-128-10) once.
    [ "$(awk '{ s += $1 } END { print s }' "$TMP/s$1.bytes")" -eq $(((784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10) * 4)) ] ||
        fail "the servers do not hold the whole model exactly once"
}
balanced 2
balanced 4

# A version-1 checkpoint: magic, version 1, and a header of zeros.
mkdir "$TMP/old"
{ printf 'SHPSCKPT\001\000\000\000'; head -c 120 /dev/zero; } >"$TMP/old/server-0-clock-000000000010.ckpt"
if "$BUILD/shardps-server" --listen 127.0.0.1:0 --checkpoint-dir "$TMP/old" --restore \
    2>"$TMP/old.err"; then
    fail "the server started from a version-1 checkpoint"
fi
grep -q "server-0-clock-000000000010.ckpt: format version 1, written by an older build" "$TMP/old.err" ||
    { cat "$TMP/old.err" >&2; fail "the version-1 checkpoint was not refused with its reason"; }
echo "PASS: servers carry balanced bytes; a table-less checkpoint is refused by name"
