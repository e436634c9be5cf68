#!/usr/bin/env bash
# README.md's option tables and each program's --help must agree. A table
# marked "<!-- options: PROGRAM -->" lists PROGRAM's options: every option a
# row names (first column) must be one PROGRAM's --help lists, with the same
# default ("—" where --help shows none; the README may add words after it);
# and every option PROGRAM's --help lists must be a row of its tables, or,
# for a server, worker or shardps-run, a row of shardps-cluster's tables
# with the same --help line (the job's options, one table in the code and in
# the README).
# Usage: readme_options.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=${1:?source dir}
build=${2:?build dir}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for prog in shardps-cluster shardps-run shardps-server shardps-worker shardps-eval; do
    "$build/$prog" --help >"$tmp/$prog.help"
done
python3 - "$src/README.md" "$tmp" <<'PY'
import re, sys
readme, tmp = sys.argv[1], sys.argv[2]

def help_of(prog):
    """name -> (default or None, description) from --help."""
    out = {}
    for line in open(f"{tmp}/{prog}.help"):
        m = re.match(r"  --([a-z0-9-]+)(?: \S+)?\s+(.*)$", line.rstrip("\n"))
        if not m or m.group(1) == "help":
            continue
        text = m.group(2)
        d = re.search(r"\[(?:[^\[\]]*, )?default ([^\]]*)\]$", text)
        out[m.group(1)] = (d.group(1) if d else None, re.sub(r" \[[^\[\]]*\]$", "", text))
    return out

tables = {}  # prog -> {name: default text}
prog = None
for n, line in enumerate(open(readme), 1):
    m = re.match(r"<!-- options: (\S+) -->", line)
    if m:
        prog = m.group(1)
        tables.setdefault(prog, {})
        continue
    if prog and not line.startswith("|"):
        if line.strip():
            prog = None
        continue
    if prog is None or line.startswith("| option") or line.startswith("|---"):
        continue
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
    names = re.findall(r"`--([a-z0-9-]+)", cells[0])
    if not names:
        sys.exit(f"README.md:{n}: a row of {prog}'s options names no option")
    for name in names:
        tables[prog][name] = (cells[1], n)

progs = ["shardps-cluster", "shardps-run", "shardps-server", "shardps-worker", "shardps-eval"]
missing = [p for p in progs if p not in tables]
if missing:
    sys.exit("README.md has no table of the options of " + ", ".join(missing))
bad = []
helps = {p: help_of(p) for p in progs}
for prog, rows in tables.items():
    h = helps[prog]
    for name, (default, n) in rows.items():
        if name not in h:
            bad.append(f"README.md:{n}: --{name} is not an option of {prog} (its --help)")
            continue
        want = h[name][0]
        if want is None:
            if default != "—":
                bad.append(f"README.md:{n}: {prog} --{name} has no default, the README says '{default}'")
        elif not (default == want or default.startswith(want + " ")):
            bad.append(f"README.md:{n}: {prog} --{name} defaults to '{want}', the README says '{default}'")
launcher = helps.get("shardps-cluster", {})
for prog, h in helps.items():
    for name, (default, text) in h.items():
        if name in tables[prog]:
            continue
        shared = prog != "shardps-cluster" and name in tables.get("shardps-cluster", {}) \
            and launcher.get(name, (None, None))[1] == text
        if not shared:
            bad.append(f"README.md: {prog} --{name} (its --help) is in no table of its options")
if bad:
    sys.exit("\n".join(bad))
print("README.md's option tables agree with --help of " + ", ".join(sorted(tables)))
PY
