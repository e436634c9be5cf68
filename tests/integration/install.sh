#!/usr/bin/env bash
# make install and make uninstall on this build, as a user gets them: the
# step after the build (make install-files) into a scratch PREFIX, then every
# part used with no environment variables (env -i; a sanitizer build's
# Python needs only the sanitizers' runtime preloaded): the programs run;
# pkg-config describes the library, and examples/c/linreg.c built with it
# runs against the installed shardps-server with no LD_LIBRARY_PATH; Python
# imports the installed package, which loads the installed library (no
# SHARDPS_LIB), and runs examples/numpy_decay.py against that server;
# python/pyproject.toml names the same version. Installing twice changes
# nothing; uninstall leaves no file and no folder that install created, and
# keeps a folder that held something of the user's. A DESTDIR install
# writes under DESTDIR and points at the final paths. The package refuses a
# library of another version. (The real /usr/local is not touched here.)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
unset PYTHONPATH SHARDPS_LIB # the installed copy must do without them
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$SRC/python/shardps/__init__.py")

make_in_src() { # target VAR=value...
    make -C "$SRC" --no-print-directory "$@" BUILD="$BUILD" PYTHON="$PYTHON" >"$TMP/make.out" 2>&1 ||
        { cat "$TMP/make.out" >&2; fail "make $* failed"; }
}
# A clean environment: PATH only, plus the sanitizers' runtime for Python.
clean_env() { env -i PATH=/usr/bin:/bin "$@"; }
clean_python() {
    if [ -n "$PY_PRELOAD" ]; then
        clean_env LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0 "$PYTHON" "$@"
    else
        clean_env "$PYTHON" "$@"
    fi
}

PREFIX=$TMP/root
mkdir -p "$TMP/user"
make_in_src install-files PREFIX="$PREFIX"
for p in shardps-server shardps-worker shardps-cluster shardps-top shardps-eval shardps-experiment; do
    [ -x "$PREFIX/bin/$p" ] || fail "make install put no $p in $PREFIX/bin"
    (cd "$TMP/user" && clean_env "$PREFIX/bin/$p" --help >/dev/null 2>&1) || fail "installed $p --help failed"
done
echo "PASS: the programs are installed and run"

pc=$PREFIX/lib/pkgconfig/shardps.pc
[ "$(pkg-config --modversion "$pc")" = "$VERSION" ] || fail "shardps.pc says $(pkg-config --modversion "$pc"), not $VERSION"
# shellcheck disable=SC2046
(cd "$TMP/user" && clean_env cc -std=c11 -Wall -Wextra -Werror -o linreg "$SRC/examples/c/linreg.c" \
    $(pkg-config --cflags --libs "$pc")) || fail "examples/c/linreg.c does not build with the installed shardps.pc"

# The installed server, OS-chosen port; linreg's 2 ranks and the NumPy
# example share it (the server adopts one table: two jobs, one after the other).
start_server() { # name args...
    mkfifo "$TMP/port.$1"
    clean_env "$PREFIX/bin/shardps-server" --listen 127.0.0.1:0 --ready-fd 3 "${@:2}" \
        3>"$TMP/port.$1" 2>"$TMP/server.$1.err" &
    read -r port <"$TMP/port.$1"
}
start_server lr --workers 2 --optimizer sgd --momentum 0 --lr 0.2 --lr-schedule constant
(cd "$TMP/user" && clean_env ./linreg --servers "127.0.0.1:$port" --rank 1 --workers 2 >lr.1 2>&1) &
joiner=$!
(cd "$TMP/user" && clean_env ./linreg --servers "127.0.0.1:$port" --rank 0 --workers 2 >lr.0 2>&1) ||
    { cat "$TMP/user/lr.0" >&2; fail "linreg against the installed library failed"; }
wait $joiner || { cat "$TMP/user/lr.1" >&2; fail "linreg rank 1 failed"; }
echo "PASS: linreg built with pkg-config runs without LD_LIBRARY_PATH: $(grep '^rank 0' "$TMP/user/lr.0")"

# Python from the installed site-packages (the current folder, as python3 -c
# puts it first on sys.path: a scratch prefix is not on the interpreter's).
purelib=$(dirname "$(find "$PREFIX" -name _installed.py -path '*/shardps/*')")
purelib=${purelib%/shardps}
[ -n "$purelib" ] || fail "no Python package under $PREFIX"
out=$(cd "$purelib" && clean_python -c 'import shardps, importlib.metadata as m
print(shardps.__file__, shardps.library_path(), shardps.__version__, m.version("shardps"))') ||
    fail "import shardps from the installed copy failed"
[ "$out" = "$purelib/shardps/__init__.py $PREFIX/lib/libshardps.so.1 $VERSION $VERSION" ] ||
    fail "the installed package: $out"
start_server np --workers 1
(cd "$purelib" && clean_python -c 'import runpy, sys; sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")' "$SRC/examples/numpy_decay.py" \
    --servers "127.0.0.1:$port" --steps 5 --out "$TMP/np.bin" >"$TMP/np.out" 2>&1) ||
    { cat "$TMP/np.out" >&2; fail "examples/numpy_decay.py on the installed package failed"; }
[ "$(stat -c %s "$TMP/np.bin")" = $((4 * (784 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10))) ] ||
    fail "numpy_decay.py wrote $(stat -c %s "$TMP/np.bin") bytes"
wait || fail "a server failed"
echo "PASS: the installed package loads the installed library and trains: $out"

# pyproject.toml: the package's name and its version's one source.
clean_env "$PYTHON" - "$SRC/python/pyproject.toml" <<'EOF' || fail "python/pyproject.toml does not describe the package"
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))
assert p["project"]["name"] == "shardps", p["project"]
assert p["project"]["dynamic"] == ["version"], p["project"]
assert p["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "shardps.__version__"}, p["tool"]
assert p["tool"]["setuptools"]["packages"] == ["shardps"], p["tool"]
EOF
echo "PASS: python/pyproject.toml describes shardps $VERSION"

# Again over itself: the same files, the same manifest.
cp "$PREFIX/share/shardps/install-manifest" "$TMP/manifest.1"
make_in_src install-files PREFIX="$PREFIX"
cmp "$TMP/manifest.1" "$PREFIX/share/shardps/install-manifest" || fail "a second install changed the manifest"
make_in_src uninstall PREFIX="$PREFIX"
[ ! -e "$PREFIX" ] || fail "uninstall left: $(find "$PREFIX" | head -5)"
echo "PASS: uninstall removes every file and folder install created (Python's bytecode too)"

# A prefix that already held something: that stays, and its folder.
mkdir -p "$TMP/root2/lib"
echo mine >"$TMP/root2/lib/keep.txt"
make_in_src install-files PREFIX="$TMP/root2"
make_in_src uninstall PREFIX="$TMP/root2"
[ "$(cd "$TMP/root2" && find . | sort | tr '\n' ' ')" = ". ./lib ./lib/keep.txt " ] ||
    fail "uninstall in a used prefix left or took: $(cd "$TMP/root2" && find .)"
echo "PASS: uninstall keeps what it did not install"

# DESTDIR: staged for packaging; the paths inside are the final ones.
make_in_src install-files PREFIX=/usr/local DESTDIR="$TMP/stage"
lib=$(sed -n "s/^LIBRARY = '\(.*\)'$/\1/p" "$(find "$TMP/stage" -name _installed.py)")
[ "$lib" = /usr/local/lib/libshardps.so.1 ] || fail "a DESTDIR install points the package at '$lib'"
[ -e "$TMP/stage/usr/local/bin/shardps-server" ] || fail "DESTDIR install put no program under DESTDIR"
grep -q "$TMP" "$TMP/stage/usr/local/share/shardps/install-manifest" && fail "the manifest names DESTDIR"
make_in_src uninstall PREFIX=/usr/local DESTDIR="$TMP/stage"
[ -z "$(ls -A "$TMP/stage")" ] || fail "DESTDIR uninstall left: $(find "$TMP/stage" | head -5)"
echo "PASS: DESTDIR installs and uninstalls under itself"

# A library of another version is refused, naming both versions.
printf 'const char *shardps_version(void) { return "0.9.0"; }\n' >"$TMP/old.c"
cc -shared -fPIC -o "$TMP/libshardps.so.1" "$TMP/old.c"
out=$(cd "$TMP/user" && clean_env SHARDPS_LIB="$TMP" PYTHONPATH="$SRC/python" PYTHONDONTWRITEBYTECODE=1 "$PYTHON" -c 'import shardps
try:
    shardps.load_library()
except shardps.ShardpsError as e:
    print(e.code, e)') || fail "loading an old library crashed"
case "$out" in
"-10002 $TMP/libshardps.so.1 (\$SHARDPS_LIB) is libshardps 0.9.0; this shardps package"*"is $VERSION"*) ;;
*) fail "a library of another version: '$out'" ;;
esac
echo "PASS: a libshardps of another version is refused: $out"
