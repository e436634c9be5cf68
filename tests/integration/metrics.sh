#!/usr/bin/env bash
# Observability during a real run: a server with --metrics-port and
# --metrics-file, two workers, one with --metrics-file and --eval-every.
#  - /metrics is scraped twice over plain HTTP and parsed line by line as
#    Prometheus text: every line is a comment, blank, or `name{labels} value`,
#    and every sample's family has a # TYPE line before it;
#  - every counter and gauge the docs name is there, with per-worker series,
#    and the counters move between the two scrapes (or, for rejected frames,
#    are above 0 at the end, after a garbage connection);
#  - shardps-top --once prints both workers with their clocks;
#  - both metrics files are JSON, one object per line, with the documented
#    fields.
# No sleeps: the server's port comes from --ready-fd (it logs the metrics port
# before writing it), the first scrape happens when worker 0 reports step 10
# (both workers are then stopped, so both are live and mid-run), the second
# once both workers have exited (the server lingers).
#
# Sync with a quorum of 1 and worker 1 slowed by 300 ms a step makes dropped
# pushes certain: worker 0 applies every step long before worker 1's gradient
# for it arrives, so worker 1's pushes are late and dropped.
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || fail "jq is missing; deploy/install-deps.sh installs it"

pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill -CONT "$p" 2>/dev/null || true
        kill "$p" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT

mkfifo "$TMP/ready" "$TMP/w0"
"$BUILD/shardps-server" --listen 127.0.0.1:0 --workers 2 --mode sync --sync-quorum 1 \
    --heartbeat-timeout 120 --linger --metrics-port 0 --metrics-file "$TMP/server.jsonl" \
    --metrics-interval 0.2 --ready-fd 3 3>"$TMP/ready" 2>"$TMP/server.err" &
spid=$!
pids+=("$spid")
read -r port <"$TMP/ready" || fail "the server reported no port"
mport=$(sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$TMP/server.err")
[ -n "$mport" ] || { cat "$TMP/server.err" >&2; fail "the server logged no metrics port"; }

scrape() { # FILE: the body of GET /metrics, after checking status and type
    exec 5<>"/dev/tcp/127.0.0.1/$mport" || fail "cannot connect to the metrics port $mport"
    printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&5
    timeout 10 cat <&5 >"$1.http" || fail "the metrics endpoint did not answer in 10 s"
    exec 5<&-
    head -n 1 "$1.http" | grep -q '^HTTP/1\.[01] 200 ' ||
        fail "GET /metrics answered '$(head -n 1 "$1.http")'"
    grep -qi '^content-type: text/plain; version=0\.0\.4' "$1.http" ||
        fail "GET /metrics is not Prometheus text 0.0.4"
    sed '1,/^\r$/d' "$1.http" >"$1"
}

check_text() { # FILE: each line a comment, blank or a sample of a declared family
    awk '
        /^$/ { next }
        /^# TYPE / { typed[$3] = 1 }
        /^#/ { next }
        /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*")*,?)?\})? [-+]?([0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|Inf|NaN)( -?[0-9]+)?$/ {
            name = $1; sub(/\{.*/, "", name)
            if (!(name in typed)) { printf "line %d: %s has no # TYPE line before it\n", NR, name; bad = 1 }
            next
        }
        { printf "line %d is not Prometheus text: %s\n", NR, $0; bad = 1 }
        END { exit bad }' "$1" || fail "$1 is not valid Prometheus text"
}

val() { # FILE NAME [MORE_LABELS]: the value of NAME{server="0"[,MORE_LABELS]}
    awk -v want="$2{server=\"0\"${3:+,$3}}" '$1 == want { print $2; found = 1 } END { exit !found }' \
        "$1" || fail "$1 has no sample $2{server=\"0\"${3:+,$3}}"
}

common=(--servers "127.0.0.1:$port" --workers 2 --steps 100 --batch 32)
"$BUILD/shardps-worker" "${common[@]}" --rank 0 --progress-every 10 --eval-every 50 \
    --metrics-file "$TMP/w0.jsonl" --report-fd 3 3>"$TMP/w0" 2>"$TMP/w0.err" &
w0=$!
pids+=("$w0")
"$BUILD/shardps-worker" "${common[@]}" --rank 1 --no-eval --slow-ms 300 2>"$TMP/w1.err" &
w1=$!
pids+=("$w1")

scraped=0
while read -r line; do
    case "$line" in *'"event":"progress"'*) ;; *) continue ;; esac
    [ "$scraped" = 0 ] || continue
    # Mid-run and both live: hold both workers while looking.
    kill -STOP "$w0" "$w1"
    scrape "$TMP/a"
    "$BUILD/shardps-top" "127.0.0.1:$mport" --once >"$TMP/top" 2>&1 ||
        { cat "$TMP/top" >&2; fail "shardps-top --once failed"; }
    # A push already in a socket can still be applied while the workers are
    # stopped, so shardps-top's clocks lie between this scrape and the first.
    scrape "$TMP/a2"
    kill -CONT "$w0" "$w1"
    scraped=1
done <"$TMP/w0"
wait "$w0" || { cat "$TMP/w0.err" >&2; fail "worker 0 failed"; }
wait "$w1" || { cat "$TMP/w1.err" >&2; fail "worker 1 failed"; }
[ "$scraped" = 1 ] || fail "worker 0 never reported progress"

# A connection that sends garbage is refused; its close is the event to wait on.
exec 7<>"/dev/tcp/127.0.0.1/$port"
printf 'this is not a shardps frame' >&7
timeout 10 cat <&7 >/dev/null || fail "the server did not close a garbage connection"
exec 7<&-
scrape "$TMP/b"

check_text "$TMP/a"
check_text "$TMP/b"

# Present and moving.
for c in pushes_total pulls_total bytes_received_total bytes_sent_total updates_total \
    staleness_samples_total; do
    a=$(val "$TMP/a" "shardps_server_$c")
    b=$(val "$TMP/b" "shardps_server_$c")
    awk -v a="$a" -v b="$b" 'BEGIN { exit !(b > a) }' ||
        fail "shardps_server_$c did not increase between the scrapes ($a, then $b)"
done
for c in dropped_pushes_total rejected_frames_total; do
    b=$(val "$TMP/b" "shardps_server_$c")
    at_least "$b" 1 || fail "shardps_server_$c is $b at the end"
done
for g in staleness_mean staleness_p99 staleness_max expected_workers nonfinite_pushes_total; do
    val "$TMP/b" "shardps_server_$g" >/dev/null
done
[ "$(val "$TMP/a" shardps_server_live_workers)" = 2 ] || fail "2 workers were not live mid-run"
[ "$(val "$TMP/b" shardps_server_live_workers)" = 0 ] || fail "workers still live at the end"
grep -q '^shardps_server_info{server="0",mode="sync",num_servers="1",workers="2"} 1$' "$TMP/a" ||
    fail "no shardps_server_info"
for r in 0 1; do
    for s in clock pushes_total pulls_total bytes_received_total bytes_sent_total \
        seconds_since_seen; do
        val "$TMP/a" "shardps_server_worker_$s" "rank=\"$r\"" >/dev/null
    done
done
at_least "$(val "$TMP/a" shardps_server_worker_clock 'rank="0"')" 10 ||
    fail "worker 0 was not at clock 10 or more when it reported step 10"

# shardps-top: a row per worker with a clock the server reported around it.
for r in 0 1; do
    lo=$(val "$TMP/a" shardps_server_worker_clock "rank=\"$r\"")
    hi=$(val "$TMP/a2" shardps_server_worker_clock "rank=\"$r\"")
    clock=$(awk -v r="$r" '$1 == r && $2 ~ /^[0-9]+$/ { print $2; exit }' "$TMP/top")
    [ -n "$clock" ] && [ "$clock" -ge "$lo" ] && [ "$clock" -le "$hi" ] ||
        { cat "$TMP/top" >&2; fail "shardps-top --once shows worker $r at clock '$clock', not $lo..$hi"; }
done
grep -q "2/2 " "$TMP/top" || { cat "$TMP/top" >&2; fail "shardps-top does not show 2/2 live"; }

# The metrics files: one JSON object per line, the documented fields.
lines_ok() { # FILE JQ_FILTER: every line is one object that passes the filter
    [ -s "$1" ] || fail "$1 is empty"
    [ "$(jq -c . "$1" | wc -l)" = "$(wc -l <"$1")" ] || fail "$1: not one JSON value per line"
    jq -s -e "all(.[]; type == \"object\" and ($2))" "$1" >/dev/null ||
        fail "$1: a line lacks a documented field: $(jq -c "select(($2) | not)" "$1" | head -n 1)"
}
head='has("event", "time", "rank", "step", "epoch", "elapsed", "train_seconds")'
traffic='has("bytes_in", "bytes_out", "staleness_mean", "staleness_max", "dropped")'
split='has("compute_seconds", "communication_seconds", "waiting_seconds")'
lines_ok "$TMP/w0.jsonl" "$head and (
    (.event == \"interval\" and has(\"clock\", \"steps\", \"loss\", \"train_accuracy\",
        \"samples_per_second\", \"interval_seconds\") and $traffic and $split) or
    (.event == \"eval\" and has(\"test_accuracy\", \"test_loss\", \"eval_seconds\")) or
    (.event == \"done\" and has(\"steps\", \"samples_per_second\", \"eval_seconds\") and $traffic
        and $split))"
[ "$(jq -s 'map(select(.event == "interval")) | length' "$TMP/w0.jsonl")" = 10 ] ||
    fail "worker 0 did not write 10 interval lines for 100 steps every 10"
[ "$(jq -s 'map(select(.event == "eval")) | length' "$TMP/w0.jsonl")" = 2 ] ||
    fail "worker 0 did not write 2 evaluations (at step 50 and at the end)"
jq -s -e 'last | .event == "done" and .steps > 0' "$TMP/w0.jsonl" >/dev/null ||
    fail "worker 0's file does not end with its done line"
# The server writes its final line when it stops; its file is read after that,
# since it appends while it runs.
kill -TERM "$spid"
wait "$spid" || fail "the server did not exit cleanly on SIGTERM"
jq -s -e --argjson p "$(val "$TMP/b" shardps_server_pushes_total)" \
    'last | .final == true and .pushes == $p' "$TMP/server.jsonl" >/dev/null ||
    fail "the server's last line is not final or disagrees with /metrics"
lines_ok "$TMP/server.jsonl" 'has("time", "elapsed", "server", "mode", "final", "pushes", "pulls",
    "bytes_in", "bytes_out", "updates", "dropped", "rejected", "nonfinite", "live_workers",
    "staleness_count",
    "staleness_mean", "staleness_p99", "staleness_max", "workers")
    and all(.workers[]; has("rank", "clock", "pushes", "pulls", "bytes_in", "bytes_out",
        "seconds_since_seen"))'
jq -s -e 'map(.workers | length) | max == 2' "$TMP/server.jsonl" >/dev/null ||
    fail "no server line lists both workers"

echo "PASS: /metrics parsed and moving, shardps-top shows both workers, metrics files valid"
