#!/usr/bin/env bash
# shardps.torch.attach on a model with BatchNorm, a frozen parameter, names
# past 31 bytes and parameters some ranks do not use (issue 23, points 2, 3
# and 6; tests/python/torch_attach.py):
#  1. two ranks whose models were initialised differently (rank 1 starting
#     first): every rank's first pull is rank 0's state_dict bit for bit
#     (BatchNorm's running statistics and an int64 num_batches_tracked past
#     2^40 included); after 4 sync steps both ranks hold the same state, the
#     counter is rank 0's plus 4 exactly, the frozen parameter and a layer no
#     rank used are unchanged, and one only rank 0 used has trained;
#  2. init="server": the servers' parameters, rank 0's buffers;
#  3. under shardps-run, attach(model) with no other argument joins the job
#     from the environment, and a script that never calls close() leaves the
#     job at exit: both workers finish, nobody is counted lost;
#  4. examples/torch_models.py under shardps-run: torchvision's ResNet-18
#     unmodified and the ViT, with nothing but attach(model, total_steps=3)
#     added to their loops, train 3 steps, the launcher's progress line
#     showing them out of the 3 they told attach;
#  5. the fine-tuning recipe (tests/python/torch_frozen.py): ResNet-18 frozen
#     under a new head on 2 servers, one of which holds frozen tensors and
#     buffers only (issue 33 point 1, issue 34 point 13), trains 3 steps in
#     sync and in async: the backbone as rank 0 began it, the head moved,
#     and in sync both ranks' parameters equal. It used to wait for good
#     after step 0 (sync) or be refused its clock (async).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

PY=(env LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 "$PYTHON")
SCRIPT="$PY_TESTS/torch_attach.py"
EXAMPLES="$(cd "$(dirname "$0")/../../examples" && pwd)"

same_state() { # a.pt b.pt: every tensor of two state_dicts equal
    "$PYTHON" -c "import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
bad = [k for k in a if not torch.equal(a[k], b[k])]
sys.exit(f'differ: {bad}' if bad or a.keys() != b.keys() else 0)" "$1" "$2"
}

for init in model server; do
    mkfifo "$TMP/port.$init"
    "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index 0 --num-servers 1 \
        --workers 2 --optimizer sgd --lr 0.1 --momentum 0 --lr-schedule constant \
        3>"$TMP/port.$init" 2>"$TMP/server.$init.err" &
    server=$!
    read -r port <"$TMP/port.$init"
    # Rank 1 first: it waits for rank 0's values.
    "${PY[@]}" "$SCRIPT" values "127.0.0.1:$port" 1 $init "$TMP/$init.1.pt" >"$TMP/$init.1.out" 2>&1 &
    rank1=$!
    "${PY[@]}" "$SCRIPT" values "127.0.0.1:$port" 0 $init "$TMP/$init.0.pt" >"$TMP/$init.0.out" 2>&1 ||
        { cat "$TMP/$init.0.out" >&2; fail "init=$init: rank 0 failed"; }
    wait $rank1 || { cat "$TMP/$init.1.out" >&2; fail "init=$init: rank 1 failed"; }
    wait $server || { cat "$TMP/server.$init.err" >&2; fail "init=$init: the server failed"; }
    cat "$TMP/$init.0.out" "$TMP/$init.1.out"
    same_state "$TMP/$init.0.pt" "$TMP/$init.1.pt" || fail "init=$init: the ranks' final states differ"
    echo "PASS: init=$init: both ranks end with the same parameters and buffers"
done

# attach(model) alone, under the launcher; no close() in the script.
"$BUILD/shardps-run" --servers 2 --workers 2 --optimizer sgd --lr 0.1 --lr-schedule constant \
    --json -- "${PY[@]}" "$SCRIPT" env "$TMP/env" >"$TMP/run.out" 2>"$TMP/run.err" ||
    { cat "$TMP/run.err" "$TMP/run.out" >&2; fail "shardps-run with attach(model) failed"; }
json=$(grep '^{' "$TMP/run.out")
[ "$(json_field "$json" workers_lost)" = 0 ] || fail "workers lost: $json"
for s in 0 1; do
    grep -q "\[server $s\] worker 0 (.*) left at clock 3 (finished)" "$TMP/run.err" &&
        grep -q "\[server $s\] worker 1 (.*) left at clock 3 (finished)" "$TMP/run.err" ||
        { cat "$TMP/run.err" >&2; fail "server $s: a worker did not leave at clock 3 at exit"; }
done
same_state "$TMP/env.0" "$TMP/env.1" || fail "the launched ranks' states differ"
echo "PASS: attach(model) joins the job shardps-run set, and the exit leaves it without close()"

# The examples: ResNet-18 as torchvision builds it, and the ViT.
for model in resnet18 vit; do
    "$BUILD/shardps-run" --servers 2 --workers 2 --progress-every 1 --optimizer sgd --lr 0.05 \
        --lr-schedule constant -- "${PY[@]}" "$EXAMPLES/torch_models.py" --model $model --steps 3 \
        --batch 16 --test 500 >"$TMP/$model.out" 2>"$TMP/$model.err" ||
        { cat "$TMP/$model.err" "$TMP/$model.out" >&2; fail "examples/torch_models.py --model $model failed"; }
    grep -qE "^step 3/3  loss [0-9.]+" "$TMP/$model.out" || { cat "$TMP/$model.out" >&2; fail "$model: no progress"; }
    grep -E "^$model: 3 steps" "$TMP/$model.out" || fail "$model: rank 0 did not finish"
done
echo "PASS: torchvision's resnet18 and the ViT train under shardps-run with attach(model) alone"

# The frozen backbone on 2 servers, in both modes.
for mode in sync async; do
    "$BUILD/shardps-run" --servers 2 --workers 2 --mode $mode --optimizer sgd --lr 0.05 \
        --lr-schedule constant --request-timeout 20 -- "${PY[@]}" "$PY_TESTS/torch_frozen.py" 3 \
        "$TMP/frozen.$mode" >"$TMP/frozen.$mode.out" 2>"$TMP/frozen.$mode.err" ||
        { cat "$TMP/frozen.$mode.err" "$TMP/frozen.$mode.out" >&2; fail "frozen backbone, $mode: failed"; }
    "$PYTHON" -c "import sys, torch
mode, out = sys.argv[1], sys.argv[2]
end = [torch.load(f'{out}.{r}') for r in (0, 1)]
start = torch.load(f'{out}.0.start')
params = [k for k in start if not k.startswith('fc.') and 'running' not in k and 'batches' not in k]
moved = [k for k in params if not torch.equal(start[k], end[0][k])]
if moved:
    sys.exit(f'frozen tensors moved: {moved[:3]}')
if torch.equal(start['fc.weight'], end[0]['fc.weight']):
    sys.exit('the head did not train')
if mode == 'sync':
    differ = [k for k in params + ['fc.weight', 'fc.bias'] if not torch.equal(end[0][k], end[1][k])]
    if differ:
        sys.exit(f'the ranks differ: {differ[:3]}')" $mode "$TMP/frozen.$mode" ||
        fail "frozen backbone, $mode: wrong weights"
done
echo "PASS: a frozen ResNet-18 backbone under a new head trains on 2 servers, in sync and async"
