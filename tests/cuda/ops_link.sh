#!/usr/bin/env bash
# No CPU computation behind --device cuda, checked where it cannot hide: in
# the symbols the object files reference. The CUDA side of a step is the
# executor (worker/model.c), the CUDA backend and its table of operations
# (worker/backend_cuda.c, backend_cuda_ops.c) and the CUDA kernels
# (kernels/*.cu); none of them may reference a function that computes on the
# CPU: the layer library's forward, backward, loss and clipping functions and
# its references (every function kernels/layers.c, layers_ref.c and
# cpu_kernels.c define, less the geometry: *_init, *_count, *_workspace,
# *_shape), BLAS (cblas_*, openblas_*), or the CPU's table of operations.
# Geometry is shared on purpose (the same structs and *_init on both sides).
# As a control, the CPU's table must reference at least one forbidden
# function per layer kind, so a list that caught nothing fails too.
#
#   ops_link.sh KERNELS_A WORKER_A BACKEND_A CUDA_KERNELS_A   (static libraries)
set -euo pipefail

[ $# -eq 4 ] || { echo "usage: $0 libps_kernels.a libps_worker.a libps_backend.a libps_cuda_kernels.a" >&2; exit 2; }
kernels=$1 worker=$2 backend=$3 cuda=$4
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# The CPU's compute functions: defined in the CPU layer library, not geometry.
forbidden=$(nm -A --defined-only -g "$kernels" |
    awk '$2 == "T" { n = split($1, p, ":"); print $3 }' |
    grep -Ev '_(init|count|workspace|shape)$' | sort -u)
[ "$(printf '%s\n' "$forbidden" | wc -l)" -ge 20 ] || fail "found only these CPU functions in $kernels: $forbidden"

# The symbols one member of an archive references, one per line.
undefined() {
    nm -A -u "$1" | awk -v m="$2" '{ n = split($1, p, ":"); if (p[2] == m) print $NF }' | sort -u
}
# The members of an archive, one per line.
members() {
    ar t "$1"
}

# Forbidden references of one member: CPU functions, BLAS, the CPU table.
bad_refs() {
    undefined "$1" "$2" | { grep -Fxf <(printf '%s\n' "$forbidden" ps_backend_cpu_ops) || true; }
    undefined "$1" "$2" | { grep -E '^(cblas_|openblas_)' || true; }
}

checked=0
check() {
    local archive=$1 member=$2 bad
    members "$archive" | grep -qx "$member" || fail "$member is not in $archive"
    bad=$(bad_refs "$archive" "$member")
    [ -z "$bad" ] || fail "$member (CUDA side) calls CPU computation: $(echo $bad)"
    checked=$((checked + 1))
}

check "$worker" model.c.o
check "$backend" backend_cuda.c.o
check "$backend" backend_cuda_ops.c.o
for m in $(members "$cuda"); do
    check "$cuda" "$m"
done
[ "$checked" -ge 5 ] || fail "only $checked objects checked"

# The control: the CPU table calls the CPU's layer functions.
control=$(bad_refs "$worker" backend_cpu_ops.c.o | wc -l)
[ "$control" -ge 8 ] || fail "the CPU table references only $control CPU functions: the list is wrong"
echo "PASS: $checked CUDA-side objects reference none of the $(printf '%s\n' "$forbidden" | wc -l) CPU compute functions, BLAS or the CPU table (the CPU table references $control)"
