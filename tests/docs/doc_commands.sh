#!/usr/bin/env bash
# Every shell block (```sh, bash, shell, console) of README.md and docs/*.md
# runs as written, or carries a mark on the line just before it saying why
# it cannot run here:
#     <!-- doc-test: skip (needs a second host) -->
# (a second host, a GPU, Docker, root, minutes-long runs: each with a shorter
# twin that runs where one makes sense). A block without a reason, or a mark
# not of this form, fails.
#
# How a block runs: as `bash -e -o pipefail` in a copy of the source tree
# (build/ is this build, read-only), in network, mount and PID namespaces of
# its own (so the documented ports, 7000 and up, are free, and nothing it
# starts outlives it) where every file outside this test's scratch folder
# is read-only (a block that installs or configures the machine fails
# rather than changing it), within BLOCK_SECONDS. Its environment is that
# of a fresh Debian 12 after `make install`: this build installed (the
# step make install runs after building) into a scratch prefix, whose bin/
# leads PATH, and whose pkg-config folder and Python site-packages are
# searched (PKG_CONFIG_PATH and PYTHONPATH stand in for /usr/local's, which
# the tools search by default). A sanitizer build's runtime is preloaded
# into Python (see pywrap).
#
# Usage: doc_commands.sh BUILD [FILE.md...] (default: README.md docs/*.md).
# Skipped (exit 77) where the namespaces cannot be made.
set -uo pipefail
BUILD=$(cd "${1:?build dir}" && pwd)
shift
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BLOCK_SECONDS=${BLOCK_SECONDS:-180}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OPENBLAS_NUM_THREADS=1

if ! unshare -rnm --pid --fork --mount-proc true 2>/dev/null; then
    echo "SKIP: cannot create network, mount and PID namespaces (unshare -rnm --pid) here"
    exit 77
fi

# The install, as make install makes it (into a scratch prefix).
PREFIX=$TMP/prefix
DESTDIR='' bash "$SRC/deploy/install.sh" install "$BUILD" "$PREFIX" /usr/bin/python3 >"$TMP/install.out" 2>&1 ||
    { cat "$TMP/install.out" >&2; echo "FAIL: installing $BUILD into $PREFIX failed" >&2; exit 1; }
purelib=$(dirname "$(dirname "$(find "$PREFIX" -name _installed.py)")")
# A sanitizer build's library loads only into a process whose first
# libraries are the sanitizers' runtime: in each block's mount namespace,
# Python's binary is covered by a script that preloads it (for every name
# and path of python3; nothing else gets it: other tools, mawk for one, are
# not clean under ASan).
pywrap=
if objdump -p "$PREFIX/lib/libshardps.so.1" | grep -q 'NEEDED.*libasan'; then
    mkdir "$TMP/py"
    touch "$TMP/py/python"
    printf '#!/bin/sh\nLD_PRELOAD="%s %s" ASAN_OPTIONS=detect_leaks=0 exec "%s" "$@"\n' \
        "$(gcc -print-file-name=libasan.so)" "$(gcc -print-file-name=libubsan.so)" "$TMP/py/python" \
        >"$TMP/py/wrapper"
    chmod 755 "$TMP/py/wrapper"
    pywrap=$(readlink -f /usr/bin/python3)
fi

# The tree: a copy of the sources (a few MB; examples find build/ and
# python/ beside themselves, and what a block writes stays here), with this
# build mounted read-only on its build/ in each block's namespace: a block
# that would configure or build there fails rather than change this build.
tree=$TMP/tree
mkdir -p "$tree/build"
# The files git would commit (not builds, runs or caches); every file
# outside a git checkout.
if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$SRC" ls-files -z --cached --others --exclude-standard |
        tar -C "$SRC" --null --ignore-failed-read -T - -cf - 2>/dev/null
else
    tar -C "$SRC" --exclude=./build --exclude='./build-*' -cf - .
fi | tar -C "$tree" -xf - || { echo "FAIL: copying $SRC failed" >&2; exit 1; }

# block FILE LINE LANG MARK: one per line (TAB-separated), then the
# block's text in $TMP/blocks/N.sh.
mkdir "$TMP/blocks" "$TMP/home" "$TMP/tmp"
files=("$@")
[ ${#files[@]} -gt 0 ] || files=("$SRC/README.md" "$SRC"/docs/*.md)
for f in "${files[@]}"; do
    awk -v file="${f#"$SRC"/}" -v dir="$TMP/blocks" '
        /^```/ {
            if (!inb) {
                inb = 1; lang = substr($0, 4); start = NR; mark = prev
                if (lang ~ /^(sh|bash|shell|console)$/) {
                    name = file; gsub("/", "_", name)
                    out = sprintf("%s/%s.%d.sh", dir, name, NR)
                    printf "%s\t%d\t%s\t%s\n", file, NR, out, mark
                } else out = ""
            } else { inb = 0; out = "" }
            prev = $0
            next
        }
        inb && out != "" { print > out; next }
        NF { prev = $0 }' "$f"
done >"$TMP/index"

passed=0 failed=0 skipped=0
while IFS=$'\t' read -r file line script mark; do
    where="$file:$line"
    if [[ "$mark" == "<!-- doc-test:"* ]]; then
        if [[ "$mark" =~ ^\<!--\ doc-test:\ skip\ \((.+)\)\ --\>$ ]]; then
            echo "SKIP $where: ${BASH_REMATCH[1]}"
            skipped=$((skipped + 1))
            continue
        fi
        echo "FAIL $where: a doc-test mark must read '<!-- doc-test: skip (REASON) -->', not '$mark'"
        failed=$((failed + 1))
        continue
    fi
    start=$SECONDS
    # shellcheck disable=SC2016 # expanded by the inner shell
    timeout -k 5 "$BLOCK_SECONDS" env -i HOME="$TMP/home" TMPDIR="$TMP/tmp" TERM=dumb LANG=C.UTF-8 \
        PATH="$PREFIX/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" PYTHONPATH="$purelib" PYTHONDONTWRITEBYTECODE=1 \
        OPENBLAS_NUM_THREADS=1 unshare -rnm --pid --fork --mount-proc --kill-child bash -c '
            ip link set lo up || exit
            mount --bind "$6" "$6" && mount -o remount,bind,ro / || exit
            mount --bind "$5" "$1/build" && mount -o remount,bind,ro "$1/build" || exit
            if [ -n "$3" ]; then
                mount --bind "$3" "$4/python" && mount --bind "$4/wrapper" "$3" || exit
            fi
            cd "$1" && exec bash -e -o pipefail "$2"' bash "$tree" "$script" "$pywrap" "$TMP/py" "$BUILD" "$TMP" \
        >"$TMP/out" 2>&1 </dev/null
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "PASS $where ($((SECONDS - start)) s)"
        passed=$((passed + 1))
    else
        [ $rc -eq 124 ] && rc="timed out after $BLOCK_SECONDS s"
        echo "FAIL $where (exit $rc): the block was"
        sed 's/^/    | /' "$script"
        echo "  its last lines:"
        tail -15 "$TMP/out" | sed 's/^/    > /'
        failed=$((failed + 1))
    fi
done <"$TMP/index"

echo "doc-test: $passed blocks ran, $skipped skipped, $failed failed"
[ $passed -gt 0 ] || { echo "FAIL: no block ran" >&2; exit 1; }
[ $failed -eq 0 ]
