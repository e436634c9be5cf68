#!/usr/bin/env bash
# The examples as a user runs them. libshardps installed into a scratch
# prefix (cmake --install, what `make install` does for the library),
# examples/c/decay.c compiled with pkg-config against it (whose run path
# and, from a sanitizer build, sanitizer flags it needs nothing besides),
# runs as rank 1 beside a shardps-worker on servers with default settings,
# and so does examples/numpy_decay.py: each one's last pull is the C
# worker's --dump-weights byte for byte. Both take the programs' options
# (--servers H:P,H:P --rank --workers --steps). examples/c/linreg.c, built
# the same way, trains a linear regression as 2 workers of 2 sync servers
# started as its header says: rank 1 starts first and joins (it waits,
# logging so, until rank 0 declares), and both end with a loss an untrained
# model cannot reach; against servers with the default optimizer it fails,
# naming the options it needs, rather than printing an unfitted line. Then
# the PyTorch example trains a few hundred sync steps to a test accuracy it
# only reaches by learning, and reports a time to that accuracy consistent
# with its other times.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
SRC="$(cd "$(dirname "$0")/../.." && pwd)"

cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null || fail "cmake --install failed"
export PKG_CONFIG_PATH="$TMP/prefix/lib/pkgconfig:$TMP/prefix/lib/x86_64-linux-gnu/pkgconfig"
pkg-config --exists shardps || fail "shardps.pc not installed"
for example in decay linreg; do
    # shellcheck disable=SC2046
    cc -std=c11 -Wall -Wextra -Werror -o "$TMP/$example" "$SRC/examples/c/$example.c" \
        $(pkg-config --cflags --libs shardps) || fail "examples/c/$example.c does not build with pkg-config"
    objdump -p "$TMP/$example" | grep -q 'NEEDED.*libshardps.so.1' ||
        fail "$example does not link libshardps.so.1"
done

start_server() { # name index server-options...
    mkfifo "$TMP/port.$1"
    "$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --server-index "$2" --num-servers 2 \
        --workers 2 "${@:3}" 3>"$TMP/port.$1" 2>"$TMP/server.$1.err" &
    read -r port <"$TMP/port.$1"
}
beside_c_worker() { # name command...: rank 1 of a job whose rank 0 is a shardps-worker
    local name=$1
    shift
    start_server "$name.0" 0
    local p0=$port
    start_server "$name.1" 1
    local servers="127.0.0.1:$p0,127.0.0.1:$port"
    "$@" --servers "$servers" --rank 1 --workers 2 --steps 10 --out "$TMP/$name.lib.bin" \
        >"$TMP/$name.out" 2>&1 &
    local lib=$!
    "$BUILD/shardps-worker" --servers "$servers" --rank 0 --workers 2 --hidden 32,16 \
        --steps 10 --no-eval --dump-weights "$TMP/$name.c.bin" 2>"$TMP/$name.c.err" ||
        { cat "$TMP/$name.c.err" >&2; fail "$name: the C worker failed"; }
    wait $lib || { cat "$TMP/$name.out" >&2; fail "$name: the example failed"; }
    cmp "$TMP/$name.c.bin" "$TMP/$name.lib.bin" || fail "$name: weights differ from the C worker's"
}
beside_c_worker c "$TMP/decay"
beside_c_worker numpy env LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 \
    "$PYTHON" "$SRC/examples/numpy_decay.py"
echo "PASS: the C and NumPy examples pull the C worker's weights bit for bit"

# linreg: y = 3x + 1 without noise, from w = (0, 0): the untrained loss is
# the mean of (3x + 1)^2 over x in [-1, 1), about 4; trained, well under
# LOSS_BOUND.
LOSS_BOUND=0.001
lr_args=(--optimizer sgd --momentum 0 --lr 0.2 --lr-schedule constant --mode sync)
start_server lr.0 0 "${lr_args[@]}"
p0=$port
start_server lr.1 1 "${lr_args[@]}"
LR_SERVERS="127.0.0.1:$p0,127.0.0.1:$port"
"$TMP/linreg" --servers "$LR_SERVERS" --rank 1 --workers 2 --steps 100 \
    >"$TMP/linreg.1.out" 2>"$TMP/linreg.1.err" &
joiner=$!
wait_for_line "$TMP/linreg.1.err" "waiting for server [01] .*no tensor table yet" 30 ||
    { cat "$TMP/linreg.1.err" >&2; fail "linreg rank 1 did not wait for the tensors"; }
# The same form from the environment, as the programs read it.
SHARDPS_SERVERS="$LR_SERVERS" SHARDPS_RANK=0 SHARDPS_WORKERS=2 "$TMP/linreg" \
    >"$TMP/linreg.0.out" 2>"$TMP/linreg.0.err" ||
    { cat "$TMP/linreg.0.err" >&2; fail "linreg rank 0 failed"; }
wait $joiner || { cat "$TMP/linreg.1.err" >&2; fail "linreg rank 1 (the joiner) failed"; }
for r in 0 1; do
    loss=$(sed -n 's/^rank [01]: loss \([0-9.]*\),.*/\1/p' "$TMP/linreg.$r.out")
    [ -n "$loss" ] || fail "linreg rank $r printed no loss: $(cat "$TMP/linreg.$r.out")"
    at_least "$LOSS_BOUND" "$loss" || fail "linreg rank $r: loss $loss after 100 steps (> $LOSS_BOUND)"
    echo "PASS: $(cat "$TMP/linreg.$r.out")"
done
# Servers with the default optimizer (Adam at 0.001): no fit in 100 steps,
# and linreg says so and fails instead of printing its line as a result.
mkfifo "$TMP/port.lr.default"
"$BUILD/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 --workers 1 \
    3>"$TMP/port.lr.default" 2>"$TMP/server.lr.default.err" &
read -r port <"$TMP/port.lr.default"
if "$TMP/linreg" --servers "127.0.0.1:$port" >"$TMP/linreg.d.out" 2>"$TMP/linreg.d.err"; then
    fail "linreg on default servers exited 0: $(cat "$TMP/linreg.d.out")"
fi
grep -q "not below 0.001: the fit needs about 100 steps on servers started with --optimizer sgd" \
    "$TMP/linreg.d.err" || { cat "$TMP/linreg.d.err" >&2; fail "linreg on default servers did not say why"; }
echo "PASS: linreg on default servers fails naming the servers' options: $(cat "$TMP/linreg.d.out")"

LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 "$PYTHON" "$SRC/examples/torch_fmnist.py" \
    --mode sync --model mlp --steps 300 --eval-every 100 --target 0.75 --build "$BUILD" \
    >"$TMP/torch.out" 2>"$TMP/torch.err" ||
    { tail -20 "$TMP/torch.err" >&2; fail "examples/torch_fmnist.py failed"; }
line=$(tail -1 "$TMP/torch.out")
acc=$(json_field "$line" test_accuracy)
at_least "$acc" 0.75 || fail "PyTorch through shardps: test accuracy $acc after 300 sync steps (< 0.75)"
# The last step is always tested, so a run that ends at the target reached it
# on the clock: somewhere in (0, train_seconds], and training fits in the wall time.
to=$(json_field "$line" seconds_to_target)
train=$(json_field "$line" train_seconds)
wall=$(json_field "$line" wall_seconds)
{ [ "$to" != null ] && at_least "$to" 0.001 && at_least "$train" "$to" && at_least "$wall" "$train"; } ||
    fail "PyTorch example: seconds_to_target $to, train_seconds $train, wall_seconds $wall"
echo "PASS: PyTorch example, 300 sync steps: $line"
