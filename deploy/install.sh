#!/usr/bin/env bash
# make install / make uninstall (see the Makefile).
#
#   install.sh install BUILD PREFIX PYTHON
#       cmake --install BUILD (the programs, libshardps, shardps.h, shardps.pc)
#       into a staging folder, adds the Python package (python/shardps) in
#       the site-packages PYTHON would look in for PREFIX, with a note of the
#       library it was installed with (shardps/_installed.py); then copies
#       the whole into DESTDIR/PREFIX, writes PREFIX/share/shardps/
#       install-manifest (every file, and every folder that did not exist
#       before), and runs ldconfig when installing for real as root.
#   install.sh uninstall PREFIX
#       removes what the manifest names: the files (with the bytecode Python
#       cached beside them), then the folders the install created, when
#       empty; runs ldconfig as install did.
#
# DESTDIR (environment) stages an install for packaging: files go under it,
# paths written into them do not include it. No pip: Debian's Python refuses
# it outside a virtual environment, and the package must match the library.
set -euo pipefail
umask 022
SRC=$(cd "$(dirname "$0")/.." && pwd)
DESTDIR=${DESTDIR:-}

die() {
    echo "shardps install: $*" >&2
    exit 1
}

# The site-packages of $1 (an interpreter) for prefix $2: its own default
# when the prefix is its default (Debian's /usr/local/lib/python3.X/
# dist-packages for /usr/local), else the first of Debian's system scheme and
# the plain prefix scheme that the interpreter searches, else the latter.
purelib() {
    "$1" - "$2" <<'EOF'
import os, sys, sysconfig
prefix = os.path.normpath(sys.argv[1])
if os.path.normpath(sysconfig.get_path("data")) == prefix:
    print(sysconfig.get_path("purelib"))
    sys.exit(0)
paths = [sysconfig.get_path("purelib", s, vars={"base": prefix, "platbase": prefix})
         for s in ("deb_system", "posix_prefix") if s in sysconfig.get_scheme_names()]
print(next((p for p in paths if p in sys.path), paths[-1]))
EOF
}

run_ldconfig() {
    if [ -z "$DESTDIR" ] && [ "$(id -u)" = 0 ]; then
        ldconfig || die "ldconfig failed"
    fi
}

do_install() {
    local build=$1 prefix=$2 python=$3 pkg lib version manifest old
    [ -f "$build/libshardps.so.1" ] || die "$build has no libshardps.so.1: build first (make)"
    [ -x "$python" ] || die "no Python interpreter at $python (PYTHON=...)"
    case "$prefix" in /*) ;; *) die "PREFIX must be an absolute path, not '$prefix'" ;; esac
    prefix=$(realpath -m "$prefix")
    # The staged tree in $work/root, the lists beside it.
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    stage=$work/root
    DESTDIR="$stage" cmake --install "$build" --prefix "$prefix" >/dev/null ||
        die "cmake --install $build failed"
    lib=$(cd "$stage" && find ".$prefix" -name libshardps.so.1 | head -1)
    [ -n "$lib" ] || die "cmake --install put no libshardps.so.1 under $prefix"
    lib=${lib#.}

    pkg=$(purelib "$python" "$prefix")/shardps
    mkdir -p "$stage$pkg"
    install -m 644 "$SRC"/python/shardps/{__init__.py,torch.py,py.typed} "$stage$pkg/"
    printf '"""Written by make install: the libshardps this copy was installed with."""\nLIBRARY = %s\n' \
        "'$lib'" >"$stage$pkg/_installed.py"
    # The distribution's metadata, so importlib.metadata and pip list see it;
    # no RECORD, so pip leaves its removal to make uninstall.
    version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$SRC/python/shardps/__init__.py")
    mkdir -p "$stage${pkg%/shardps}/shardps-$version.dist-info"
    printf 'Metadata-Version: 2.1\nName: shardps\nVersion: %s\nSummary: %s\nRequires-Dist: numpy\n' \
        "$version" "Client of a shardps parameter-server training job" \
        >"$stage${pkg%/shardps}/shardps-$version.dist-info/METADATA"
    echo "make install (shardps)" >"$stage${pkg%/shardps}/shardps-$version.dist-info/INSTALLER"

    manifest=$prefix/share/shardps/install-manifest
    mkdir -p "$stage$(dirname "$manifest")"
    # Folders to create (parents first), and those an earlier install created.
    (cd "$stage" && find . -mindepth 1 -type d | sed 's/^\.//' | sort) | while read -r d; do
        [ -d "$DESTDIR$d" ] || echo "d $d"
    done >"$work/new-dirs"
    {
        cat "$work/new-dirs"
        old=$DESTDIR$manifest
        if [ -f "$old" ]; then grep '^d /' "$old" || true; fi
        (cd "$stage" && find . ! -type d | sed 's/^\./f /')
        echo "f $manifest"
    } | sort -u >"$work/manifest"
    # Files an earlier install put there that this one does not bring.
    if [ -f "$DESTDIR$manifest" ]; then
        grep '^f /' "$DESTDIR$manifest" | while read -r _ f; do
            grep -qxF "f $f" "$work/manifest" || rm -f "$DESTDIR$f"
        done
    fi
    cp "$work/manifest" "$stage$manifest"
    # One entry at a time: existing folders keep their owner and mode; a
    # file is replaced (a new inode: a running program keeps the old one).
    mkdir -p "${DESTDIR:-/}"
    while read -r _ d; do
        mkdir -m 755 "$DESTDIR$d" || die "cannot create $DESTDIR$d"
    done <"$work/new-dirs"
    grep '^f /' "$work/manifest" | while read -r _ f; do
        rm -f "$DESTDIR$f"
        cp -P --preserve=mode,timestamps "$stage$f" "$DESTDIR$f" || die "cannot write $DESTDIR$f"
    done
    run_ldconfig
    echo "installed shardps $version under $DESTDIR$prefix (Python package: $DESTDIR$pkg;" \
        "make uninstall PREFIX=$prefix removes it)"
}

do_uninstall() {
    local prefix manifest entries kept=()
    prefix=$(realpath -m "$1")
    manifest=$DESTDIR$prefix/share/shardps/install-manifest
    [ -f "$manifest" ] || die "no shardps installed under $DESTDIR$prefix ($manifest is missing)"
    grep -qv '^[fd] /' "$manifest" && die "$manifest: a line is not 'f PATH' or 'd PATH'"
    entries=$(cat "$manifest")
    grep '^f /' <<<"$entries" | while read -r _ f; do
        rm -f "$DESTDIR$f"
        case "$f" in
        *.py) rm -f "$DESTDIR$(dirname "$f")/__pycache__/$(basename "$f" .py)".*.pyc ;;
        esac
    done
    # Deepest first; a folder holding what install did not put there stays.
    while read -r _ d; do
        [ -d "$DESTDIR$d" ] || continue
        rmdir "$DESTDIR$d/__pycache__" 2>/dev/null || true
        rmdir "$DESTDIR$d" 2>/dev/null || kept+=("$DESTDIR$d")
    done < <(grep '^d /' <<<"$entries" | sort -r || true)
    run_ldconfig
    for d in "${kept[@]}"; do
        echo "shardps uninstall: kept $d: it holds files the install did not put there" >&2
    done
    echo "uninstalled shardps from $DESTDIR$prefix"
}

case "${1:-}" in
install) [ $# -eq 4 ] || die "usage: install.sh install BUILD PREFIX PYTHON"
    do_install "$2" "$3" "$4" ;;
uninstall) [ $# -eq 2 ] || die "usage: install.sh uninstall PREFIX"
    do_uninstall "$2" ;;
*) die "usage: install.sh install BUILD PREFIX PYTHON | uninstall PREFIX" ;;
esac
