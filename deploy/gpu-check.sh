#!/usr/bin/env bash
# The GPU check, in one command of at most 5 minutes: builds shardps on a GPU
# host from the tree and carried Debian packages, then, stage by stage, runs
# the CUDA tests (which must pass there, not skip); the default MLP and the
# CNN as shardps-cluster jobs on --device cuda and --device cpu (step time,
# samples/s, test accuracy); bench-train on the wide MLP on the GPU in FP32,
# TF32 and bf16 and on the default MLP (the split of a step, and the fraction
# of communication hidden behind compute); and PyTorch through shardps with
# CUDA tensors, with whatever PyTorch the host has.
#
# Each stage appends its lines to summary.txt and one JSON object to
# results.jsonl in the results folder the moment it ends, so a run cut short
# (the device tool's limit, a hang) still reports every stage before the
# cut. The folder holds four files, whatever happens: env.txt, summary.txt,
# results.jsonl and logs.txt (every step's output, its tail where long).
#
# Made for a host with the CUDA toolkit, a C compiler and CMake but no
# package registry and no pkg-config (this project's device machine). The
# Debian 12 packages the build needs are fetched beforehand, on a machine
# with apt:
#
#   deploy/gpu-check.sh --fetch     # .deb/: only .deb files, under 64 MiB
#
# Copy the tree with .deb/ to the GPU host and run deploy/gpu-check.sh there
# (device tool: carry [".deb"], SHARDPS_COMMIT=<hash> bash deploy/gpu-check.sh;
# the results come back from $OUT). The packages are unpacked (dpkg -x, or
# python3 where dpkg is missing) under $TMPDIR/shardps-gpu-check/root, never
# installed, and pkg-config (carried too), CMake and the loader are pointed
# there. Without .deb/ the system's own packages are used. Each step has its
# own timeout inside the budget; a failed test, job or benchmark is recorded
# and the next stage still runs, but the exit status is 1.
#
# Options: --fetch (download the packages, then stop), --no-gpu (build, and
# run only the CPU parts: no CUDA tests, no --device cuda), --out DIR
# (results; default $OUT when set, else $TMPDIR/shardps-gpu-check/results),
# --build DIR (default $TMPDIR/shardps-gpu-check/build). SHARDPS_COMMIT names
# the commit where the tree has no .git; GPU_CHECK_ARCHS the CUDA
# architectures (default 90, the H100/H200's). See docs/gpu.md.
set -euo pipefail

cd "$(dirname "$0")/.."
SRC=$PWD
# 5 minutes, less the grace a stopped step gets before it is killed and the
# time the summary takes.
BUDGET=280
DEB=.deb
DEB_LIMIT=$((64 * 1024 * 1024))
WORK=${TMPDIR:-/tmp}/shardps-gpu-check
BUILD=$WORK/build
RESULTS=${OUT:-$WORK/results}
ARCHS=${GPU_CHECK_ARCHS:-90}
FETCH=0
NO_GPU=0
# Steps of the training jobs: the MLP's epoch (60,000 / (2 workers x 64)),
# a third of one for the CNN, whose CPU run is the slowest stage.
MLP_STEPS=468
CNN_STEPS=300

# Runtime and -dev packages of every library CMake asks for (Criterion
# included: the CUDA tests and bench-train live in tests/), the libraries
# those load, the protobuf-c compiler and its libraries, pkg-config, and the
# data set. Left out: what every Debian or Ubuntu system with a C compiler
# has (libc6, libstdc++6, zlib1g, libffi8, libgnutls30), and the compiler
# itself, which nvcc needs on a GPU host anyway. A bare Debian 12 with gcc,
# CMake and ninja builds from these alone (docs/gpu.md).
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
    [ -n "${SUMMARY:-}" ] && echo "gpu-check: STOPPED: $*" >>"$SUMMARY"
    exit 1
}

while [ $# -gt 0 ]; do
    case "$1" in
    --fetch) FETCH=1 ;;
    --no-gpu) NO_GPU=1 ;;
    --out) RESULTS=${2:?--out needs a folder}; shift ;;
    --build) BUILD=${2:?--build needs a folder}; shift ;;
    -h | --help) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
JSONL=$RESULTS/results.jsonl
LOGS=$RESULTS/logs.txt
: >"$SUMMARY"
: >"$JSONL"
: >"$LOGS"
FAILED=0
note() {
    echo "gpu-check: $*" | tee -a "$SUMMARY"
}
# One stage's result as a JSON object (its fields as given, already JSON).
record() {
    echo "{\"stage\":\"$1\",\"at_s\":$SECONDS${2:+,$2}}" >>"$JSONL"
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
    note "using the packages of $DEB/ unpacked in $ROOT ($SECONDS s)"
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
commit=${SHARDPS_COMMIT:-$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)}
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $commit"
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
note "shardps GPU check, commit $commit, GPU: $gpu, $(date -u +%Y-%m-%dT%H:%MZ)"
record env "\"commit\":\"$commit\",\"gpu\":\"$gpu\",\"date\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\""

# step NAME LIMIT COMMAND...: runs COMMAND under LIMIT seconds or what is left
# of the budget, its output in $WORK/NAME.log and, the tail where long, in
# logs.txt. Returns its status.
step() {
    local name=$1 limit=$2 rc=0 log=$WORK/$1.log
    shift 2
    echo "gpu-check: $name (at most $(left "$limit") s)"
    # timeout signals the step's whole process group (servers and workers
    # too), and kills it 10 s later if it is still there.
    timeout -k 10 "$(left "$limit")" "$@" >"$log" 2>&1 || rc=$?
    [ "$rc" = 124 ] && echo "(stopped by gpu-check: past its time limit)" >>"$log"
    {
        echo "==== $name (exit $rc, at $SECONDS s): $*"
        if [ "$(wc -l <"$log")" -gt 400 ]; then
            head -n 50 "$log"
            echo "... ($(wc -l <"$log") lines; the last 300:)"
            tail -n 300 "$log"
        else
            cat "$log"
        fi
    } >>"$LOGS"
    return "$rc"
}
# A failed step after the build (NAME EXIT [WHY]): its log's tail, and a
# failure in the end.
failed() {
    note "$1 FAILED (exit $2${3:+: $3}; see logs.txt)"
    record "$1" "\"failed\":true,\"exit\":$2"
    tail -n 15 "$WORK/$1.log" >&2
    FAILED=1
}
# The value of a numeric or string field of a one-line JSON object.
field() {
    printf '%s' "$1" | sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p"
}

# ---- build --------------------------------------------------------------------
mkdir -p "$WORK"
# A build folder another checkout configured (CMake refuses to reuse it) is
# started afresh rather than failing the run.
if [ -f "$BUILD/CMakeCache.txt" ] &&
    ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$SRC" "$BUILD/CMakeCache.txt"; then
    rm -rf "$BUILD"
fi
# Only the GPU at hand's architecture: half the nvcc time of the default two.
# --no-gpu still builds the CUDA code where CMake finds nvcc (it must compile).
cuda_flag=("-DCMAKE_CUDA_ARCHITECTURES=$ARCHS")
[ "$NO_GPU" = 1 ] || cuda_flag+=(-DPS_CUDA=ON)
step cmake 60 cmake -S "$SRC" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    "${cuda_flag[@]}" || { tail -n 30 "$WORK/cmake.log" >&2; die "cmake failed (see logs.txt)"; }
have_cuda=0
grep -q "shardps: CUDA found" "$WORK/cmake.log" && have_cuda=1
[ "$have_cuda" = 1 ] || [ "$NO_GPU" = 1 ] || die "CMake did not find CUDA (see logs.txt)"
targets=(shardps-server shardps-worker shardps-cluster bench-train shardps)
[ "$have_cuda" = 1 ] && targets+=(test_cuda test_layers_cuda test_models_cuda)
step build 150 cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}" ||
    { tail -n 30 "$WORK/build.log" >&2; die "build failed (see logs.txt)"; }
note "built ${targets[*]} (CUDA: $([ "$have_cuda" = 1 ] && echo "sm $ARCHS" || echo no)) by $SECONDS s"
record build "\"cuda\":$have_cuda,\"archs\":\"$ARCHS\""

# ---- the CUDA tests -----------------------------------------------------------
if [ "$NO_GPU" = 1 ]; then
    note "CUDA tests: not run (--no-gpu)"
else
    for prog in test_layers_cuda test_cuda test_models_cuda; do
        rc=0
        step "$prog" 60 "$BUILD/tests/$prog" || rc=$?
        passed=$(grep -c '^PASS' "$WORK/$prog.log" || true)
        fails=$(grep '^FAIL' "$WORK/$prog.log" | awk '{print $2}' | tr '\n' ' ' || true)
        case "$rc" in
        0)
            note "$prog: all $passed passed"
            record "$prog" "\"passed\":$passed,\"failed\":[]"
            ;;
        77) failed "$prog" 77 "no usable GPU" ;;
        *)
            note "$prog: $passed passed, FAILED: ${fails:-(crashed or cut; see logs.txt)}"
            record "$prog" "\"passed\":$passed,\"failed\":\"${fails}\",\"exit\":$rc"
            FAILED=1
            ;;
        esac
    done
fi

# ---- the default MLP and the CNN, GPU against CPU --------------------------------
devices=(cpu)
[ "$NO_GPU" = 1 ] || devices=(cuda cpu)
note "jobs: 2 servers + 2 workers, sync, batch 64 per worker, Adam; ms/step = 128 samples / samples/s"
printf '%-5s %-5s %6s %8s %11s %9s %9s\n' model dev steps "wall s" "samples/s" "ms/step" "test acc" |
    tee -a "$SUMMARY"
for model in mlp cnn; do
    steps=$MLP_STEPS
    [ "$model" = cnn ] && steps=$CNN_STEPS
    for dev in "${devices[@]}"; do
        rc=0
        step "job-$model-$dev" 90 "$BUILD/shardps-cluster" --model "$SRC/models/$model.model" \
            --steps "$steps" --device "$dev" --json --data-dir "$DATA" || rc=$?
        [ "$rc" = 0 ] || { failed "job-$model-$dev" "$rc"; continue; }
        json=$(grep '^{"test_accuracy"' "$WORK/job-$model-$dev.log" | tail -n 1)
        sps=$(field "$json" samples_per_second)
        awk -v m="$model" -v d="$dev" -v n="$steps" -v w="$(field "$json" wall_seconds)" -v s="$sps" \
            -v a="$(field "$json" test_accuracy)" \
            'BEGIN { printf "%-5s %-5s %6d %8.1f %11.0f %9.2f %9.4f\n", m, d, n, w, s, (s > 0 ? 128000 / s : 0), a }' |
            tee -a "$SUMMARY"
        grep -m 1 "compute on " "$WORK/job-$model-$dev.log" | sed 's/^.*compute on /  compute on /' |
            tee -a "$SUMMARY"
        record "job" "\"model\":\"$model\",\"device\":\"$dev\",\"steps\":$steps,\"result\":$json"
    done
done

# ---- bench-train: the wide MLP in FP32, TF32 and bf16, then the default --------
# (GPU first; on the CPU only the default model, which takes seconds.)
benches=("cpu default")
[ "$NO_GPU" = 1 ] || benches=("cuda wide" "cuda-tf32 wide" "cuda-bf16 wide" "cuda default" "cpu default")
note "bench-train (sync, Adam, 2 servers, 2 workers, batch 64; ms per step; hidden = the fraction of communication alone hidden behind compute)"
printf '%-10s %-8s %10s %9s %9s %9s %7s %7s\n' run model samples/s step "compute" "comm" ratio hidden |
    tee -a "$SUMMARY"
for b in "${benches[@]}"; do
    run=${b% *} model=${b#* }
    args=(--device "${run%%-*}" --models "$model" --data-dir "$DATA")
    [ "$model" = wide ] && args+=(--steps 20)
    [ "$model" = default ] && args+=(--steps 100)
    case "$run" in
    *-tf32) args+=(--tf32) ;;
    *-bf16) args+=(--precision bf16) ;;
    esac
    rc=0
    step "bench-$run-$model" 60 "$BUILD/tests/bench/bench-train" "${args[@]}" || rc=$?
    [ "$rc" = 0 ] || { failed "bench-$run-$model" "$rc"; continue; }
    json=$(grep '^{' "$WORK/bench-$run-$model.log" | tail -n 1)
    printf '%-10s %-8s %10s %9s %9s %9s %7s %7s\n' "$run" "$model" "$(field "$json" samples_per_s)" \
        "$(field "$json" step_ms)" "$(field "$json" compute_only_ms)" "$(field "$json" comm_only_ms)" \
        "$(field "$json" ratio)" "$(field "$json" hidden_fraction)" | tee -a "$SUMMARY"
    record "bench" "\"run\":\"$run\",\"result\":$json"
done

# ---- PyTorch through shardps ----------------------------------------------------
# One PyTorch worker (rank 0 of 1) and two servers: the CNN of
# examples/torch_fmnist.py trained through shardps.torch with its parameters
# on the GPU, then on the CPU, the same steps; samples/s and test accuracy.
torch_devices=(cpu)
[ "$NO_GPU" = 1 ] || torch_devices=(cuda cpu)
if ! python3 -c 'import torch' >/dev/null 2>&1; then
    note "PyTorch: none on this host (python3 cannot import torch); not run"
    record torch "\"skipped\":\"no torch\""
else
    cat >"$WORK/torch_check.py" <<'EOF'
import gzip, json, os, subprocess, sys, time
import numpy as np
import torch
import torch.nn.functional as F

src, build, data, device, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
sys.path.insert(0, os.path.join(src, "python"))
import shardps.torch  # noqa: E402


def load(kind):
    with gzip.open(f"{data}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{data}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc1, self.fc2 = torch.nn.Linear(64 * 7 * 7, 128), torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.dropout(F.relu(self.fc1(x.flatten(1))), 0.25, self.training))


servers = []
for i in range(2):
    r, w = os.pipe()
    p = subprocess.Popen([f"{build}/shardps-server", "--listen", "127.0.0.1:0", "--server-index",
                          str(i), "--num-servers", "2", "--workers", "1", "--mode", "sync",
                          "--lr", "0.001", "--ready-fd", str(w)], pass_fds=(w,))
    os.close(w)
    with os.fdopen(r) as f:
        servers.append((p, "127.0.0.1:" + f.readline().strip()))
torch.manual_seed(1)
x, y = load("train")
tx, ty = load("t10k")
model = CNN().to(device)
ps = shardps.torch.attach(model, [a for _, a in servers], 0, 1, total_steps=steps)
g = torch.Generator().manual_seed(1)
order = torch.randperm(len(x), generator=g)
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
sync()
t0 = time.perf_counter()
for s in range(steps):
    idx = order[(s * 64) % (len(x) - 64):][:64]
    xb, yb = x[idx].to(device, non_blocking=True), y[idx].to(device, non_blocking=True)
    F.cross_entropy(model(xb), yb).backward()
ps.sync()
sync()
seconds = time.perf_counter() - t0
model.eval()
with torch.no_grad():
    right = sum((model(tx[i:i + 1000].to(device)).argmax(1).cpu() == ty[i:i + 1000]).sum().item()
                for i in range(0, len(tx), 1000))
ps.close()
for p, _ in servers:
    p.wait(timeout=60)
print(json.dumps({"device": device, "torch": torch.__version__, "steps": steps,
                  "samples_per_second": round(steps * 64 / seconds, 1),
                  "ms_per_step": round(seconds * 1000 / steps, 3),
                  "test_accuracy": right / len(tx),
                  "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None}))
EOF
    note "PyTorch: the CNN through shardps.torch, 1 worker, 2 servers, batch 64, $CNN_STEPS steps"
    for dev in "${torch_devices[@]}"; do
        rc=0
        step "torch-$dev" 60 env SHARDPS_LIB="$BUILD/libshardps.so.1" PYTHONUNBUFFERED=1 \
            python3 "$WORK/torch_check.py" "$SRC" "$BUILD" "$DATA" "$dev" "$CNN_STEPS" || rc=$?
        [ "$rc" = 0 ] || { failed "torch-$dev" "$rc"; continue; }
        json=$(grep '^{' "$WORK/torch-$dev.log" | tail -n 1)
        note "  torch $(field "$json" torch) on $dev: $(field "$json" samples_per_second) samples/s," \
            "$(field "$json" ms_per_step) ms/step, test accuracy $(field "$json" test_accuracy)"
        record torch "\"result\":$json"
    done
fi

note "total $SECONDS s; results in $RESULTS"
record done "\"failed\":$FAILED"
[ "$FAILED" = 0 ] || die "some steps failed (see $SUMMARY)"
