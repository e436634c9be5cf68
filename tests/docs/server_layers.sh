#!/usr/bin/env bash
# The server calls in one direction (issue 31): the front sequences, the
# handlers judge, the state modules below them own their state, the rules
# at the bottom are pure. Run by ctest as server_layers on the built archive
# (libps_server.a): for each object, the symbols it uses (nm -u) against the
# symbols each other object defines. Fails naming every call that does not
# go strictly down a layer (a call within one layer is a call between
# peers, which do not know each other), every call from one frame handler
# into another, and every object of the archive that no layer names, so a
# new file cannot land without its place in the order.
set -euo pipefail
archive=${1:?usage: server_layers.sh libps_server.a}
[ -f "$archive" ] || { echo "FAIL: $archive is missing" >&2; exit 1; }

# Layers, top first, by room (server/<room>/): a file may use what the
# layers below it define, nothing of its own layer or above.
layers=(
    "kv_server restore stats server_config" # front/: the sequencer and the API; main/
    "table place"                           # front/: the table's parts together; payloads placed
    "handshake held"                        # front/: the handshake's judge; the pulls held
    "durability"                            # durability/: when checkpoints are written and read
    "checkpoint"
    "checkpoint_file"
    "checkpoint_rows"
    "rows row_tables"                       # rows/: row tables as units; their stores
    "row_store row_accum row_wire"
    "row_admit row_map row_optimizer"
    "chunks writes"                         # dense/: chunks as units; rank 0's values
    "tensors"
    "keys values apply_queue"
    "shard"
    "clocks pull unit_wire"                 # units/: what every unit shares
    "units"
    "membership peer"                       # job/: who is in the job; the connections
    "consistency validate table_life optimizer lr_schedule" # rules/: pure
)
# The handlers of frames: none calls another, whatever their layers.
handlers=" handshake chunks rows writes "

layer_of() {
    local i
    for i in "${!layers[@]}"; do
        case " ${layers[$i]} " in *" $1 "*) echo "$i"; return ;; esac
    done
    echo "-1"
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
members=$(symbols --defined-only | awk '{ print $1 }' | sort -u)

bad=()
for m in $members; do
    f=$(stem "$m")
    [ "$(layer_of "$f")" -ge 0 ] || bad+=("$f.c is in no layer of this check: give it its place")
done
for l in "${layers[@]}"; do
    for f in $l; do
        [[ " $(echo $members) " == *" $f.c.o "* ]] ||
            bad+=("$f.c is named as a layer of the server but is not in $archive")
    done
done
while read -r member sym; do
    from=$(stem "$member")
    to=${defined_in[$sym]:-}
    [ -n "$to" ] && [ "$to" != "$from" ] || continue
    if [[ "$handlers" == *" $from "* && "$handlers" == *" $to "* ]]; then
        bad+=("$from.c calls $sym of $to.c: one handler calls another")
    elif [ "$(layer_of "$to")" -le "$(layer_of "$from")" ]; then
        bad+=("$from.c calls $sym, defined in $to.c, in its own layer or one above it")
    fi
done < <(symbols -u)

if [ ${#bad[@]} -gt 0 ]; then
    echo "FAIL: the server does not call strictly down its layers (${#bad[@]}):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
fi
order=""
for l in "${layers[@]}"; do order+="${order:+ -> }${l// /, }"; done
echo "the server calls down only: $order"
