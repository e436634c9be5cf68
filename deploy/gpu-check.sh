#!/usr/bin/env bash
# The GPU check, in one command: builds shardps on a GPU host, runs the CUDA
# tests (which must pass there, not skip), trains one epoch of the default
# job with --device cuda and --device cpu, and runs tests/bench bench-train
# on the default and wide models with --device cpu, --device cuda and
# --device cuda --tf32, writing every log and a summary to one results folder.
#
# Made for a host with the CUDA toolkit, a C compiler and CMake but no
# package registry and no pkg-config (this project's device machine). The
# Debian 12 packages the build needs are fetched beforehand, on a machine
# with apt:
#
#   deploy/gpu-check.sh --fetch     # .deb/: only .deb files, under 64 MiB
#
# Copy the tree with .deb/ to the GPU host and run deploy/gpu-check.sh there.
# The packages are unpacked (dpkg -x, or python3 where dpkg is missing) under
# $TMPDIR/shardps-gpu-check/root, never installed, and pkg-config (carried
# too), CMake and the loader are pointed there. Without .deb/ the system's
# own packages are used. Everything runs under one 8-minute budget, each step
# with its own timeout; a failed test, job or benchmark is recorded and the
# next step still runs, but the exit status is 1.
#
# Options: --fetch (download the packages, then stop), --no-gpu (build and
# run only the CPU parts: no CUDA tests, no --device cuda), --epochs N (the
# training jobs; default 1), --out DIR (results; default $OUT when set, else
# $TMPDIR/shardps-gpu-check/results), --build DIR (default
# $TMPDIR/shardps-gpu-check/build). SHARDPS_COMMIT names the commit in the
# results where the tree has no .git. See docs/gpu.md.
set -euo pipefail

cd "$(dirname "$0")/.."
SRC=$PWD
# 8 minutes, less the grace a stopped step gets before it is killed.
BUDGET=460
DEB=.deb
DEB_LIMIT=$((64 * 1024 * 1024))
WORK=${TMPDIR:-/tmp}/shardps-gpu-check
BUILD=$WORK/build
RESULTS=${OUT:-$WORK/results}
EPOCHS=1
FETCH=0
NO_GPU=0

# Runtime and -dev packages of every library CMake asks for (Criterion
# included: test_cuda and bench-train live in tests/), the libraries those
# load, the protobuf-c compiler and its libraries, pkg-config, and the data
# set. Left out: what every Debian or Ubuntu system with a C compiler has
# (libc6, libstdc++6, zlib1g, libffi8, libgnutls30), and the compiler itself,
# which nvcc needs on a GPU host anyway. A bare Debian 12 with gcc, CMake and
# ninja builds from these alone (docs/gpu.md, "How the CPU half was proved").
PACKAGES=(
    libuv1 libuv1-dev
    libprotobuf-c1 libprotobuf-c-dev protobuf-c-compiler libprotobuf32 libprotoc32
    libcriterion3 libcriterion-dev libnanomsg5
    libgit2-1.5 libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1 libssh2-1
    libopenblas0 libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev libgfortran5
    zlib1g-dev
    libinih1 libinireader0 libinih-dev
    libmicrohttpd12 libmicrohttpd-dev
    libsodium23 libsodium-dev
    pkgconf pkgconf-bin libpkgconf3
    dataset-fashion-mnist
)

die() {
    echo "gpu-check: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case "$1" in
    --fetch) FETCH=1 ;;
    --no-gpu) NO_GPU=1 ;;
    --epochs) EPOCHS=${2:?--epochs needs a number}; shift ;;
    --out) RESULTS=${2:?--out needs a folder}; shift ;;
    --build) BUILD=${2:?--build needs a folder}; shift ;;
    -h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
done

if [ "$FETCH" = 1 ]; then
    command -v apt-get >/dev/null || die "--fetch needs apt-get (a Debian 12 machine with a registry)"
    rm -rf "$DEB"
    mkdir -p "$DEB"
    (cd "$DEB" && apt-get download "${PACKAGES[@]}")
    # apt-get download leaves nothing else, but only .deb files may travel.
    find "$DEB" -mindepth 1 ! -name '*.deb' -exec rm -rf {} +
    size=$(du -sb "$DEB" | cut -f1)
    [ "$size" -lt "$DEB_LIMIT" ] || die "$DEB/ holds $size bytes, more than 64 MiB"
    echo "gpu-check: $(ls "$DEB"/*.deb | wc -l) packages in $DEB/ ($((size / 1024)) KiB);" \
        "copy the tree with $DEB/ to the GPU host and run deploy/gpu-check.sh there"
    exit 0
fi

# Seconds of the budget left, at most $1 (at least 1).
left() {
    local l=$((BUDGET - SECONDS))
    [ "$l" -gt "$1" ] && l=$1
    echo $((l > 1 ? l : 1))
}

# Extracts the data member of one .deb into a folder: dpkg-deb where there
# is one, else python3 (a .deb is an ar archive holding data.tar.*).
unpack() {
    if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$1" "$2"
        return
    fi
    python3 - "$1" "$2" <<'EOF'
import io, sys, tarfile
blob = open(sys.argv[1], "rb").read()
if blob[:8] != b"!<arch>\n":
    sys.exit(sys.argv[1] + ": not a .deb")
pos = 8
while pos + 60 <= len(blob):
    name, size = blob[pos:pos + 16].decode().strip(), int(blob[pos + 48:pos + 58])
    if name.startswith("data.tar"):
        tar = tarfile.open(fileobj=io.BytesIO(blob[pos + 60:pos + 60 + size]))
        tar.extractall(sys.argv[2], filter="tar")
    pos += 60 + size + (size & 1)
EOF
}

mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
SUMMARY=$RESULTS/summary.txt
: >"$SUMMARY"
FAILED=0
note() {
    echo "gpu-check: $*" | tee -a "$SUMMARY"
}

DATA=/usr/share/datasets/fashion-mnist
if compgen -G "$DEB/*.deb" >/dev/null; then
    ROOT=$WORK/root
    stamp=$(ls -l "$DEB"/*.deb | md5sum | cut -d' ' -f1)
    if [ "$(cat "$ROOT/.unpacked" 2>/dev/null)" != "$stamp" ]; then
        command -v dpkg-deb >/dev/null || command -v python3 >/dev/null ||
            die "unpacking $DEB/*.deb needs dpkg-deb or python3"
        rm -rf "$ROOT"
        mkdir -p "$ROOT"
        for f in "$DEB"/*.deb; do unpack "$f" "$ROOT"; done
        # The .pc files name /usr: point them (prefixes, and the absolute
        # paths some packages write) at the unpacked tree instead. Their
        # Requires.private only matter to static links, and pkg-config would
        # otherwise insist on every private dependency's -dev package.
        find "$ROOT" -name '*.pc' -type f -exec sed -i -E \
            -e "s#(=|-I|-L)/usr#\1$ROOT/usr#g" -e '/^Requires\.private:/d' {} +
        # No maintainer scripts run, so the alternatives links that name
        # OpenBLAS as "openblas" are made here.
        lib=$ROOT/usr/lib/x86_64-linux-gnu
        ln -sf "$lib/openblas-pthread/pkgconfig/openblas.pc" "$lib/pkgconfig/openblas.pc"
        echo "$stamp" >"$ROOT/.unpacked"
    fi
    lib=$ROOT/usr/lib/x86_64-linux-gnu
    export PKG_CONFIG_PATH=$lib/pkgconfig:$ROOT/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export CMAKE_PREFIX_PATH=$ROOT/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$ROOT/usr/bin:$PATH
    [ -d "$ROOT$DATA" ] && DATA=$ROOT$DATA
    note "using the packages of $DEB/ unpacked in $ROOT"
else
    note "no $DEB/*.deb; using the system's packages"
fi
[ -d "$DATA" ] || die "no Fashion-MNIST at $DATA (fetch dataset-fashion-mnist with --fetch)"
export PATH=$PATH:/usr/local/cuda/bin:/usr/local/nvidia/bin
for tool in cmake pkg-config protoc-c timeout awk; do
    command -v "$tool" >/dev/null || die "$tool is missing on this host"
done
command -v cc >/dev/null || command -v gcc >/dev/null || die "no C compiler (cc or gcc) on this host"
# CMake's default generator needs make; the device machine has ninja.
generator=()
if command -v ninja >/dev/null; then
    generator=(-G Ninja)
elif ! command -v make >/dev/null; then
    die "neither ninja nor make on this host"
fi

gpu="none (--no-gpu)"
if [ "$NO_GPU" = 0 ]; then
    command -v nvcc >/dev/null || die "nvcc not found (CUDA toolkit; or pass --no-gpu)"
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)
    gpu=${gpu:-unknown (nvidia-smi gave nothing)}
fi
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: ${SHARDPS_COMMIT:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}"
    echo "gpu: $gpu"
    uname -a
    grep -h '^PRETTY_NAME' /etc/os-release 2>/dev/null || true
    echo "cores: $(nproc)"
    for t in cc gcc cmake ninja make nvcc python3 pkg-config dpkg-deb; do
        printf '%s: %s\n' "$t" "$(command -v "$t" >/dev/null && "$t" --version 2>&1 | head -n 1 || echo absent)"
    done
    command -v nvcc >/dev/null && nvcc --version | tail -n 2
    command -v nvidia-smi >/dev/null && nvidia-smi 2>&1 | head -n 15
} >"$RESULTS/env.txt" 2>&1 || true

# step NAME LIMIT COMMAND...: runs COMMAND with its output in NAME.log, under
# LIMIT seconds or what is left of the budget. Returns its status.
step() {
    local name=$1 limit=$2 rc=0
    shift 2
    echo "gpu-check: $name (at most $(left "$limit") s)"
    # timeout signals the step's whole process group (servers and workers
    # too), and kills it 10 s later if it is still there.
    timeout -k 10 "$(left "$limit")" "$@" >"$RESULTS/$name.log" 2>&1 || rc=$?
    [ "$rc" = 124 ] && echo "(stopped by gpu-check: past its time limit)" >>"$RESULTS/$name.log"
    return "$rc"
}
# A failed step after the build: its log's tail, and a failure in the end.
failed() {
    note "$1 FAILED (exit $2; log: $RESULTS/$1.log)"
    tail -n 15 "$RESULTS/$1.log" >&2
    FAILED=1
}

step cmake 120 cmake -S "$SRC" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release ||
    { tail -n 30 "$RESULTS/cmake.log" >&2; die "cmake failed (log: $RESULTS/cmake.log)"; }
have_cuda=0
grep -q "shardps: CUDA found" "$RESULTS/cmake.log" && have_cuda=1
[ "$have_cuda" = 1 ] || [ "$NO_GPU" = 1 ] || die "CMake did not find CUDA (see $RESULTS/cmake.log)"
targets=(shardps-server shardps-worker shardps-cluster bench-train)
[ "$have_cuda" = 1 ] && targets+=(test_cuda)
step build 240 cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}" ||
    { tail -n 30 "$RESULTS/build.log" >&2; die "build failed (log: $RESULTS/build.log)"; }
note "built ${targets[*]} in $SECONDS s"

if [ "$NO_GPU" = 1 ]; then
    note "CUDA tests: not run (--no-gpu)"
else
    rc=0
    step test_cuda 120 "$BUILD/tests/test_cuda" || rc=$?
    case "$rc" in
    0) note "CUDA tests: all passed ($(grep -c '^PASS' "$RESULTS/test_cuda.log"))" ;;
    77) failed test_cuda "77: no usable GPU" ;;
    *) failed test_cuda "$rc" ;;
    esac
fi

# One job per device; the summary's JSON line has the wall time, samples/s
# and test accuracy.
devices=(cpu)
[ "$NO_GPU" = 1 ] || devices=(cuda cpu)
declare -A wall sps acc
for dev in "${devices[@]}"; do
    rc=0
    step "job-$dev" 120 "$BUILD/shardps-cluster" --epochs "$EPOCHS" --device "$dev" --json \
        --data-dir "$DATA" || rc=$?
    [ "$rc" = 0 ] || { failed "job-$dev" "$rc"; continue; }
    json=$(grep '^{"test_accuracy"' "$RESULTS/job-$dev.log" | tail -n 1)
    wall[$dev]=$(printf '%s' "$json" | sed -n 's/.*"wall_seconds":\([0-9.]*\).*/\1/p')
    sps[$dev]=$(printf '%s' "$json" | sed -n 's/.*"samples_per_second":\([0-9.]*\).*/\1/p')
    acc[$dev]=$(printf '%s' "$json" | sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p')
    grep -m 1 "compute on " "$RESULTS/job-$dev.log" | sed 's/^/  /' | tee -a "$SUMMARY"
done

# bench-train, GPU first: on a short budget the CPU's numbers matter least.
benches=(cpu)
[ "$NO_GPU" = 1 ] || benches=(cuda cuda-tf32 cpu)
for b in "${benches[@]}"; do
    args=(--device "${b%-tf32}" --data-dir "$DATA")
    [ "$b" = cuda-tf32 ] && args+=(--tf32)
    rc=0
    step "bench-$b" 150 "$BUILD/tests/bench/bench-train" "${args[@]}" || rc=$?
    [ "$rc" = 0 ] || { failed "bench-$b" "$rc"; continue; }
    grep '^{' "$RESULTS/bench-$b.log" >"$RESULTS/bench-$b.jsonl"
done

# The default job: 2 workers of batch 64, so a worker's step is 2 * 64
# samples / (samples/s of both).
{
    echo
    echo "shardps GPU check ($(date -u +%Y-%m-%dT%H:%MZ), GPU: $gpu)"
    printf '%-6s %10s %12s %10s %10s\n' device "wall s" "samples/s" "ms/step" "test acc"
    for dev in "${devices[@]}"; do
        [ -n "${acc[$dev]:-}" ] || continue
        awk -v d="$dev" -v w="${wall[$dev]}" -v s="${sps[$dev]}" -v a="${acc[$dev]}" \
            'BEGIN { printf "%-6s %10.1f %12.0f %10.3f %10.4f\n", d, w, s, (s > 0 ? 128000 / s : 0), a }'
    done
    if [ -n "${acc[cuda]:-}" ] && [ -n "${acc[cpu]:-}" ]; then
        awk -v g="${acc[cuda]}" -v c="${acc[cpu]}" 'BEGIN { d = (g - c) * 100; if (d < 0) d = -d;
            printf "accuracy difference: %.2f points (%s)\n", d, d <= 0.5 ? "within 0.5" : "MORE THAN 0.5" }'
    fi
    echo "(${EPOCHS} epoch(s), 2 servers + 2 workers, sync, batch 64 per worker)"
    echo
    echo "bench-train (2 servers, 2 workers, batch 64, sync, Adam; ms per step):"
    printf '%-10s %-8s %10s %9s %13s %11s %7s\n' run model samples/s "step" "compute alone" "comm alone" ratio
    for b in "${benches[@]}"; do
        [ -s "$RESULTS/bench-$b.jsonl" ] || continue
        awk -v b="$b" '{
            m = $0; sub(/.*"model":"/, "", m); sub(/".*/, "", m)
            printf "%-10s %-8s %10s %9s %13s %11s %7s\n", b, m, f("samples_per_s"), f("step_ms"),
                f("compute_only_ms"), f("comm_only_ms"), f("ratio") }
            function f(k,   v) { v = $0; sub(".*\"" k "\":", "", v); sub(/[,}].*/, "", v); return v }' \
            "$RESULTS/bench-$b.jsonl"
    done
    echo
    echo "total ${SECONDS} s; logs in $RESULTS"
} | tee -a "$SUMMARY"
[ "$FAILED" = 0 ] || die "some steps failed (see $SUMMARY)"
