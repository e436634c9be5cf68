#!/usr/bin/env bash
# Runs each libFuzzer target of tests/fuzz for a bounded time (`make fuzz`).
# Usage: run.sh BUILD_DIR [SECONDS_PER_TARGET (30)]. Each target starts from
# the committed seeds (tests/fuzz/corpus/NAME, only read) plus a scratch
# corpus in BUILD_DIR/fuzz-corpus/NAME that keeps what earlier runs found;
# crashing inputs land in BUILD_DIR/fuzz-artifacts/. Input sizes are capped
# per target: 16 KiB for the decoder (several frames with payloads; a longer
# header only matters through its length prefix, judged before it is read),
# 4 KiB for the handshake and the client (one connection's worth of
# requests, or answers, for the small fuzz model) and for a tensor table
# (32 declarations fit many times over), 8 KiB for a checkpoint and a model
# file (the fuzz model's, and the seeds', fit), 4 KiB for a rows request
# (its header's 12 bytes and up to 500 IDs). Prints the executions each
# target reached and fails if any crashed, leaked, hung or ran out of memory.
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR [SECONDS_PER_TARGET]}
secs=${2:-30}
src=$(cd "$(dirname "$0")" && pwd)
declare -A max_len=([frame]=16384 [handshake]=4096 [client]=4096 [table]=4096 [checkpoint]=8192
    [model]=8192 [rows]=4096)
status=0
mkdir -p "$build/fuzz-artifacts"
for name in frame handshake client table checkpoint model rows; do
    work="$build/fuzz-corpus/$name"
    log="$build/fuzz-$name.log"
    mkdir -p "$work"
    if "$build/tests/fuzz/fuzz_$name" -max_total_time="$secs" -max_len="${max_len[$name]}" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/fuzz-artifacts/$name-" "$work" "$src/corpus/$name" \
        >"$log" 2>&1; then
        verdict="no crash"
    else
        verdict="FAILED: see $log and $build/fuzz-artifacts/"
        status=1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)
    echo "fuzz_$name: ${execs:-?} executions in $secs s (${rate:-?}/s, ${cov:-cov: ?}): $verdict"
done
exit $status
