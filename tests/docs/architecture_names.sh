#!/usr/bin/env bash
# docs/architecture.md must name every source file and program of the tree
# (issue 13, item 6): a module by its name in backticks (`shard`), or a file
# by a path ending in its name (`server/dense/shard.c`). Run by ctest as
# doc_architecture; fails listing each file the page does not name, so a new
# module cannot land without its line in the map.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
doc="$root/docs/architecture.md"
[ -f "$doc" ] || { echo "FAIL: $doc is missing" >&2; exit 1; }

# The tracked files where the tree is a git checkout, else every file: the
# check then also works on an exported tarball.
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git -C "$root" ls-files --cached --others --exclude-standard)
else
    files=$(cd "$root" && find . -type f | sed 's|^\./||')
fi

missing=()
while IFS= read -r f; do
    case "$f" in
    common/* | server/* | worker/* | lib/* | kernels/* | tools/* | include/* | python/* | proto/*) ;;
    *) continue ;;
    esac
    case "$f" in
    *.c | *.h | *.cu | *.py | *.proto | *.sh) ;;
    *) [ -x "$root/$f" ] || continue ;; # a program without a suffix
    esac
    base=$(basename "$f")
    stem=${base%.*}
    # A module is named as `stem`, `ps_stem` or `dir/stem`; a file as .../base or `base`.
    if grep -Eq "[\`/](ps_)?${stem}\`|(^|[/\` ])${base//./\\.}([\` ,.:)]|$)" "$doc"; then
        continue
    fi
    missing+=("$f")
done <<<"$files"

if [ ${#missing[@]} -gt 0 ]; then
    echo "FAIL: docs/architecture.md does not name ${#missing[@]} file(s):" >&2
    printf '  %s\n' "${missing[@]}" >&2
    exit 1
fi
echo "docs/architecture.md names every source file"
