#!/bin/sh
# Runs bench-sparse (its path, then its flags) and checks its output: it
# exits 0, prints a pull and a push line, every line is a JSON object, and
# every pull or push case moved rows (rows_per_second > 0).
set -eu
out=$("$@")
printf '%s\n' "$out"
printf '%s\n' "$out" | python3 -c '
import json, sys
ops = []
for line in sys.stdin:
    d = json.loads(line)
    ops.append(d["op"])
    if d["op"] in ("pull", "push"):
        assert d["rows_per_second"] > 0 and d["ratio"] > 0, line
assert "pull" in ops and "push" in ops, ops
print("bench_sparse_small: %d lines parsed" % len(ops))
'
