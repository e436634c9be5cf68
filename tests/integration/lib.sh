# Shared helpers for the integration tests: each test is a real cluster of
# processes on 127.0.0.1 with OS-chosen ports. Usage: source it after setting
# BUILD (the build folder) from $1.
set -euo pipefail
BUILD=${1:?build dir}
WDIFF=${2:-}
CLUSTER="$BUILD/shardps-cluster"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# One BLAS thread per process: tests run several processes on two cores.
export OPENBLAS_NUM_THREADS=1

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# json_field LINE KEY: the number after "KEY": in a one-line JSON object.
json_field() {
    printf '%s' "$1" | sed -n "s/.*\"$2\":\([-0-9.enull]*\).*/\1/p"
}

# wait_for_line FILE REGEX SECONDS: returns once a line of FILE (a log still
# being written, perhaps not yet created) matches REGEX, or fails after SECONDS.
# tail -F waits for the file to appear and wakes on each
# write, so this follows the event rather than polling on a delay.
wait_for_line() {
    timeout "$3" grep -q -m1 -E "$2" <(tail -n +1 -F --pid=$$ "$1" 2>/dev/null)
}

# wait_gone PID SECONDS: returns once process PID (not necessarily ours, so
# wait(1) cannot be used) has exited, or fails after SECONDS.
# A zombie counts as gone: a child whose parent died is reparented to init,
# which may reap it late, and until then tail --pid still sees it. Each round
# waits on the process itself (tail --pid), at most 0.2 s, then looks again.
wait_gone() {
    local end=$((SECONDS + $2))
    while [ -e "/proc/$1" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]; do
        [ "$SECONDS" -lt "$end" ] || return 1
        timeout 0.2 tail --pid="$1" -s 0.05 -f /dev/null || true
    done
}

# at_least A B: succeeds when the number A >= B.
at_least() {
    awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'
}

# same_with_check ERRFILE COMMAND...: runs COMMAND again with --check right
# after the shardps program, and fails unless it exits with the same status
# and prints the same stderr as the run did into ERRFILE (timestamps and the
# run's own log lines aside: a refusal is one plain line). --check must
# refuse exactly what the run refuses, in the same words.
same_with_check() {
    local errfile=$1 want_rc=$2 rc args=()
    shift 2
    for a in "$@"; do
        args+=("$a")
        case $a in */shardps-*) args+=(--check) ;; esac
    done
    set +e
    timeout 60 "${args[@]}" >/dev/null 2>"$errfile.check"
    rc=$?
    set -e
    [ "$rc" -eq "$want_rc" ] || { cat "$errfile.check" >&2; fail "'${args[*]}' exited $rc, the run $want_rc"; }
    cmp -s "$errfile" "$errfile.check" ||
        { diff "$errfile" "$errfile.check" >&2; fail "'${args[*]}' does not say what the run says"; }
}
