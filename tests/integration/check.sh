#!/usr/bin/env bash
# --check refuses everything a run would refuse before training, in the
# run's words, for the launcher, the worker and the server: an unknown layer
# in the model file, a data folder that is not there, --sync-quorum above
# --workers, a --save-model nobody can write, an auth token file that is not
# there. Each refusal is one line and exit 2, the same with and without
# --check; the run refuses it before any process starts. A good job passes
# --check (exit 0) and says what it would run.
source "$(dirname "$0")/lib.sh"
SERVER="$BUILD/shardps-server"
WORKER="$BUILD/shardps-worker"

printf 'flatten\ndense out=16\nfrobnicate\ndense out=classes\n' >"$TMP/bad.model"

# refused WANT COMMAND...: one line containing WANT, exit 2, and the same
# line from COMMAND --check.
refused() {
    local want=$1 rc=0
    shift
    timeout 60 "$@" >/dev/null 2>"$TMP/err" || rc=$?
    [ "$rc" -eq 2 ] || { cat "$TMP/err" >&2; fail "'$*' exited $rc, not 2"; }
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || { cat "$TMP/err" >&2; fail "'$*': more than one line"; }
    grep -q -- "$want" "$TMP/err" || { cat "$TMP/err" >&2; fail "'$*': no '$want'"; }
    same_with_check "$TMP/err" 2 "$@"
    echo "ok: $(cat "$TMP/err")"
}

for prog in "$CLUSTER" "$WORKER"; do
    refused "$TMP/bad.model:3: unknown layer 'frobnicate'" "$prog" --model "$TMP/bad.model"
    refused "--data $TMP/no-data: no such folder" "$prog" --data "$TMP/no-data"
    refused "--save-model $TMP/no/model.bin: no folder $TMP/no" "$prog" --save-model "$TMP/no/model.bin"
    refused "$TMP/no-token" "$prog" --auth-token-file "$TMP/no-token"
done
for prog in "$CLUSTER" "$SERVER"; do
    refused "--sync-quorum 3 exceeds --workers 2" "$prog" --sync-quorum 3 --workers 2
    refused "--checkpoint-every 5 needs --checkpoint-dir" "$prog" --checkpoint-every 5
done
# The launcher's own: a drill that names a worker the job does not have,
# and an evaluator's curve nobody can write (issue 21's leftover).
refused "--kill-worker" "$CLUSTER" --workers 2 --kill-worker 5@10
refused "--evaluator $TMP/no/curve.jsonl: no folder $TMP/no" "$CLUSTER" --evaluator "$TMP/no/curve.jsonl"

# A good job: exit 0 and what it would run; nothing started.
"$CLUSTER" --check --steps 300 --batch 64 >"$TMP/out" 2>"$TMP/err" ||
    { cat "$TMP/err" >&2; fail "shardps-cluster --check refused a good job"; }
grep -q "the options are valid: 300 steps (--steps)" "$TMP/out" ||
    { cat "$TMP/out" >&2; fail "--check did not say what it would run"; }
"$WORKER" --check --model "$(dirname "$0")/../../models/cnn.model" >"$TMP/out" 2>"$TMP/err" ||
    { cat "$TMP/err" >&2; fail "shardps-worker --check refused the CNN"; }
"$SERVER" --check --listen 127.0.0.1:0 >"$TMP/out" || fail "shardps-server --check refused a good server"
echo "PASS: --check refuses what a run refuses, in the run's words"
