# Running the Python package against this build's libshardps. A sanitizer
# build's library needs its runtime loaded first (LD_PRELOAD); Python's own
# allocations are not ours to leak-check.
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../python" && pwd)"
export PYTHONDONTWRITEBYTECODE=1
# Debian's interpreter, which has Debian's python3-numpy and python3-torch.
PYTHON=${PYTHON:-/usr/bin/python3}
export SHARDPS_LIB="$BUILD/libshardps.so.1"
PY_PRELOAD=
if objdump -p "$SHARDPS_LIB" | grep -q 'NEEDED.*libasan'; then
    PY_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
fi
PY_TESTS="$(cd "$(dirname "${BASH_SOURCE[0]}")/../python" && pwd)"

run_python() { # command out-file args...: tests/python/numpy_job.py, failing with its output
    local cmd=$1 out=$2
    shift 2
    LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 \
        "$PYTHON" "$PY_TESTS/numpy_job.py" "$cmd" "$@" >"$out" 2>&1 ||
        { cat "$out" >&2; fail "numpy_job.py $cmd failed"; }
}
