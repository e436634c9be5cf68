#!/usr/bin/env bash
# The recommendation example through shardps-run (issue 24 point 7) on its
# small preset: examples/torch_recsys.py --mode sync (2 servers, 2 workers,
# the 20 fields' embeddings served by row tables with per-row Adagrad, the
# MLPs shardps tensors) trains the model --mode local trains in one process:
# the same test AUC within 1e-3, and the servers store exactly the rows
# local trained; --mode async learns too (an untrained model scores 0.5).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
EXAMPLE="$(dirname "$0")/../../examples/torch_recsys.py"

recsys() { # mode: the last line (the JSON result) of a run, failing with its output
    LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 \
        "$PYTHON" "$EXAMPLE" --small --data "$TMP/data" --build "$BUILD" --mode "$1" \
        >"$TMP/$1.out" 2>"$TMP/$1.err" || { cat "$TMP/$1.err" "$TMP/$1.out" >&2; fail "--mode $1 failed"; }
    tail -n 1 "$TMP/$1.out"
}

local_line=$(recsys local) # generates the data set
sync_line=$(recsys sync)
async_line=$(recsys async)
echo "local: $local_line"
echo "sync:  $sync_line"
echo "async: $async_line"
"$PYTHON" - "$local_line" "$sync_line" "$async_line" <<'PY' || fail "the runs disagree"
import json
import sys
local, sync, async_ = map(json.loads, sys.argv[1:])
assert (sync["mode"], async_["mode"]) == ("sync", "async"), (sync["mode"], async_["mode"])
for r in (sync, async_):
    assert r["rows"] == local["rows"], f"{r['mode']}: {r['rows']} rows stored, local trained {local['rows']}"
    assert r["samples"] == local["samples"], f"{r['mode']}: {r['samples']} samples, local {local['samples']}"
assert abs(sync["test_auc"] - local["test_auc"]) <= 1e-3, f"sync {sync['test_auc']}, local {local['test_auc']}"
assert async_["test_auc"] > 0.6, f"async {async_['test_auc']} did not learn"
PY
echo "PASS: sync trains as one process, async learns, rows stored = rows trained"
