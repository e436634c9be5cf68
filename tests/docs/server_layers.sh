#!/usr/bin/env bash
# The server's front calls in one direction (issue 21): the dispatcher
# (kv_server.c: listener, dispatch, membership, lifecycle) calls the
# handlers, the handlers call the shared modules below them, and nothing
# calls back up. Run by ctest as server_layers on the built archive
# (libps_server.a): for each object, the symbols it uses (nm -u) against the
# symbols each other object defines. Fails naming every call that goes up a
# layer, or into the front from a module below it (shard, checkpoint, ...).
set -euo pipefail
archive=${1:?usage: server_layers.sh libps_server.a}
[ -f "$archive" ] || { echo "FAIL: $archive is missing" >&2; exit 1; }

# Layers of the front, top first. A file may use what its own layer and the
# layers below define. Every other object of the archive (the shard, the
# optimizer, checkpoints, the rules) sits below the front and uses none of it.
layers=(
    "kv_server"
    "handshake held dense durability tensors membership values rows"
    "peer clocks keys"
)

layer_of() {
    local i
    for i in "${!layers[@]}"; do
        case " ${layers[$i]} " in *" $1 "*) echo "$i"; return ;; esac
    done
    echo "${#layers[@]}" # below the front
}

# member name (kv_server.c.o) -> stem (kv_server)
stem() {
    local b=${1%.o}
    echo "${b%.c}"
}

# "archive:member.c.o:[address] T symbol" -> "member.c.o symbol"
symbols() {
    nm -A "$@" "$archive" 2>/dev/null |
        awk '{ n = split($1, a, ":"); for (i = 1; i <= n; i++) if (a[i] ~ /\.o$/) print a[i], $NF }'
}

declare -A defined_in
while read -r member sym; do
    defined_in[$sym]=$(stem "$member")
done < <(symbols --defined-only -g)
members=" $(symbols --defined-only | awk '{ print $1 }' | sort -u | tr '\n' ' ') "

bad=()
while read -r member sym; do
    from=$(stem "$member")
    to=${defined_in[$sym]:-}
    [ -n "$to" ] && [ "$to" != "$from" ] || continue
    if [ "$(layer_of "$to")" -lt "$(layer_of "$from")" ]; then
        bad+=("$from.c calls $sym, defined in $to.c, a layer above it")
    fi
done < <(symbols -u)

for l in "${layers[@]}"; do
    for f in $l; do
        [[ "$members" == *" $f.c.o "* ]] ||
            bad+=("$f.c is named as a layer of the front but is not in $archive")
    done
done

if [ ${#bad[@]} -gt 0 ]; then
    echo "FAIL: the server's front calls up its layers (${#bad[@]}):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
fi
order=""
for l in "${layers[@]}"; do order+="${order:+ -> }${l// /, }"; done
echo "the server's front calls down only: $order"
