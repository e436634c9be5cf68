#!/usr/bin/env bash
# The GPU check: builds shardps on a GPU host, runs the CUDA tests (which
# must pass there, not skip), and times one epoch of the default job with
# --device cuda against --device cpu, printing a short table. Made for a host
# with the CUDA toolkit and a compiler but no package registry: the Debian
# packages shardps needs are fetched beforehand, elsewhere, with
#
#   deploy/gpu-check.sh --fetch        # on a Debian 12 machine with apt
#
# which puts them in .deb/ (git-ignored); copy the tree with .deb/ to the GPU
# host and run deploy/gpu-check.sh there. The packages are unpacked with
# dpkg -x into .deb/root, never installed, and CMake, pkg-config and the
# loader are pointed at them. Without a .deb/ folder the system's own
# packages are used. Everything runs under one 5-minute budget.
#
# Options: --fetch (download the packages, then stop), --no-gpu (no GPU here:
# build and run everything else, report the CUDA tests as skipped),
# --epochs N (default 1), --build DIR (default build-gpu). See docs/gpu.md.
set -euo pipefail

cd "$(dirname "$0")/.."
BUDGET=300
DEB=.deb
BUILD=build-gpu
EPOCHS=1
FETCH=0
NO_GPU=0

# Runtime and -dev packages of every library CMake asks for, the protobuf-c
# compiler and its libraries, the libraries Criterion's own needs at run time,
# and the data set. Packages every Debian system has (libc6, libstdc++6,
# zlib1g, libffi8, libgnutls30) are left out.
PACKAGES=(
    libuv1 libuv1-dev
    libprotobuf-c1 libprotobuf-c-dev protobuf-c-compiler libprotobuf32 libprotoc32
    libcriterion3 libcriterion-dev libnanomsg5
    libgit2-1.5 libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1 libssh2-1
    libopenblas0 libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev libgfortran5
    zlib1g-dev
    libinih1 libinireader0 libinih-dev
    libmicrohttpd12 libmicrohttpd-dev
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
    --build) BUILD=${2:?--build needs a folder}; shift ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
done

if [ "$FETCH" = 1 ]; then
    command -v apt-get >/dev/null || die "--fetch needs apt-get (a Debian machine with a registry)"
    mkdir -p "$DEB"
    (cd "$DEB" && apt-get download "${PACKAGES[@]}")
    echo "gpu-check: $(ls "$DEB"/*.deb | wc -l) packages in $DEB/ ($(du -sh "$DEB" | cut -f1));" \
        "copy the tree with $DEB/ to the GPU host and run deploy/gpu-check.sh there"
    exit 0
fi

# Seconds of the budget left (at least 1): each step runs under `timeout`
# with that many, so an overrun fails the step that ran out of time.
left() {
    echo $((BUDGET - SECONDS > 1 ? BUDGET - SECONDS : 1))
}

DATA=/usr/share/datasets/fashion-mnist
if compgen -G "$DEB/*.deb" >/dev/null; then
    ROOT=$PWD/$DEB/root
    if [ ! -e "$ROOT/.unpacked" ]; then
        command -v dpkg >/dev/null || die "unpacking $DEB/*.deb needs dpkg"
        rm -rf "$ROOT"
        mkdir -p "$ROOT"
        for f in "$DEB"/*.deb; do dpkg -x "$f" "$ROOT"; done
        # The .pc files name /usr: point them (prefixes, and the absolute
        # paths some packages write) at the unpacked tree instead. Their
        # Requires.private only matter to static links, and pkg-config would
        # otherwise insist on every private dependency's -dev package.
        find "$ROOT" -name '*.pc' -type f -exec sed -i -E \
            -e "s#(=|-I|-L)/usr#\1$ROOT/usr#g" -e '/^Requires\.private:/d' {} +
        # dpkg -x runs no maintainer scripts, so the alternatives links
        # that name OpenBLAS as "openblas" are made here.
        ob=$ROOT/usr/lib/x86_64-linux-gnu/openblas-pthread
        [ -e "$ROOT/usr/lib/x86_64-linux-gnu/pkgconfig/openblas.pc" ] ||
            ln -sf "$ob/pkgconfig/openblas.pc" "$ROOT/usr/lib/x86_64-linux-gnu/pkgconfig/openblas.pc"
        touch "$ROOT/.unpacked"
    fi
    lib=$ROOT/usr/lib/x86_64-linux-gnu
    export PKG_CONFIG_PATH=$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$ROOT/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export CMAKE_PREFIX_PATH=$ROOT/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$ROOT/usr/bin:$PATH
    [ -d "$ROOT$DATA" ] && DATA=$ROOT$DATA
    echo "gpu-check: using the packages unpacked in $ROOT"
else
    echo "gpu-check: no $DEB/*.deb; using the system's packages"
fi
[ -d "$DATA" ] || die "no Fashion-MNIST at $DATA (fetch dataset-fashion-mnist with --fetch)"
for tool in cmake cc pkg-config protoc-c; do
    command -v "$tool" >/dev/null || die "$tool is missing on this host"
done
export PATH=$PATH:/usr/local/cuda/bin
if [ "$NO_GPU" = 0 ]; then
    command -v nvcc >/dev/null || die "nvcc not found (CUDA toolkit; or pass --no-gpu)"
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)
    echo "gpu-check: GPU: ${gpu:-unknown (nvidia-smi gave nothing)}"
fi

echo "gpu-check: building in $BUILD"
mkdir -p "$BUILD"
clog=$BUILD/gpu-check-cmake.log
blog=$BUILD/gpu-check-build.log
timeout "$(left)" cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$clog" 2>&1 ||
    { tail -n 30 "$clog" >&2; die "cmake failed (log: $clog)"; }
grep -q "shardps: CUDA found" "$clog" || [ "$NO_GPU" = 1 ] || die "CMake did not find CUDA (see $clog)"
targets=(shardps-server shardps-worker shardps-cluster)
grep -q "shardps: CUDA found" "$clog" && targets+=(test_cuda)
timeout "$(left)" cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}" >"$blog" 2>&1 ||
    { tail -n 30 "$blog" >&2; die "build failed (log: $blog)"; }

cuda_tests="not built (no CUDA toolkit)"
if [ -x "$BUILD/tests/test_cuda" ]; then
    set +e
    timeout "$(left)" "$BUILD/tests/test_cuda"
    rc=$?
    set -e
    case "$rc" in
    0) cuda_tests="all passed" ;;
    77) [ "$NO_GPU" = 1 ] || die "the CUDA tests found no usable GPU (see above)"
        cuda_tests="skipped: no GPU" ;;
    *) die "the CUDA tests failed (exit $rc)" ;;
    esac
fi

# One epoch of the default job per device; the summary's JSON line has the
# wall time, samples/s and test accuracy.
devices=(cpu)
[ "$NO_GPU" = 1 ] || devices=(cuda cpu)
declare -A wall sps acc
for dev in "${devices[@]}"; do
    echo "gpu-check: training $EPOCHS epoch(s) of the default job on --device $dev"
    log=$BUILD/gpu-check-$dev.log
    timeout "$(left)" "$BUILD/shardps-cluster" --epochs "$EPOCHS" --device "$dev" --json \
        --data-dir "$DATA" >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "the $dev run failed (log: $log)"; }
    json=$(grep '^{"test_accuracy"' "$log" | tail -n 1)
    wall[$dev]=$(printf '%s' "$json" | sed -n 's/.*"wall_seconds":\([0-9.]*\).*/\1/p')
    sps[$dev]=$(printf '%s' "$json" | sed -n 's/.*"samples_per_second":\([0-9.]*\).*/\1/p')
    acc[$dev]=$(printf '%s' "$json" | sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p')
    grep -m 1 "compute on " "$log" | sed 's/^/  /'
done

# The default job: 2 workers of batch 64, so a worker's step is 2 * 64
# samples / (samples/s of both).
{
    echo
    echo "shardps GPU check ($(date -u +%Y-%m-%dT%H:%MZ), ${gpu:-no GPU}; CUDA tests: $cuda_tests)"
    printf '%-6s %10s %12s %10s %10s\n' device "wall s" "samples/s" "ms/step" "test acc"
    for dev in "${devices[@]}"; do
        awk -v d="$dev" -v w="${wall[$dev]}" -v s="${sps[$dev]}" -v a="${acc[$dev]}" \
            'BEGIN { printf "%-6s %10.1f %12.0f %10.3f %10.4f\n", d, w, s, (s > 0 ? 128000 / s : 0), a }'
    done
    if [ "$NO_GPU" = 0 ]; then
        awk -v g="${acc[cuda]}" -v c="${acc[cpu]}" 'BEGIN { d = (g - c) * 100; if (d < 0) d = -d;
            printf "accuracy difference: %.2f points (%s)\n", d, d <= 0.5 ? "within 0.5" : "MORE THAN 0.5" }'
    fi
    echo "(${EPOCHS} epoch(s), 2 servers + 2 workers, sync, batch 64 per worker; total ${SECONDS}s)"
} | tee "$BUILD/gpu-check.txt"
