#!/usr/bin/env bash
# make compose-check: the compose cluster for real. Builds the image from
# deploy/docker-compose.yml's own build section, then runs that file,
# unchanged, through these scenarios, each on a fresh checkpoint volume:
#
#   sync          the job as shipped: both workers and both servers exit 0,
#                 rank 0's final test accuracy at least --min-accuracy
#   async         the same with SHARDPS_MODE=async
#   worker-rejoin w1 is killed (SIGKILL) mid-run and started again: it must
#                 resume at the job's step (not 0) and the job end as above
#   server-restart ps1 is restarted (`restart`, SIGTERM then start) mid-run:
#                 its new run must restore the clock it checkpointed on the
#                 way down, the workers must rejoin there, the job end as above
#   worker-lost   w1 is killed mid-run and never comes back: w0 must finish
#                 and the servers must end the job within --lost-timeout
#
# Each scenario prints PASS or FAIL with the reason and its time; the script
# exits 1 if any failed. Logs of every service go to runs/compose-check/.
#
# The engine: Debian's docker.io dockerd, started in a network namespace of
# its own (`ip netns add` + nsenter, which keeps the host's cgroup mounts)
# with --iptables=false --ip6tables=false, so nothing on the host's network
# changes; its default bridge lives in that namespace only. No image registry
# is reachable, so debian:12 and debian:12-slim are made here: one
# `debootstrap --variant=minbase bookworm` tree, imported under both tags.
# The Dockerfile's apt-get (build and runtime stages) reaches Debian's
# archive through an HTTP proxy (tinyproxy on the host's loopback), bridged
# into the namespace over a Unix socket by two socat processes and passed as
# the predefined build argument http_proxy; containers get no other way out.
#
# Requirements: root, Debian 12; installs docker.io, docker-compose,
# debootstrap, socat and tinyproxy with apt-get when they are missing. Uses
# `docker compose` (v2) when it exists, else docker-compose (v1).
# The base tree and the engine's data (images, build cache) are kept in
# --state DIR (default /var/tmp/shardps-compose-check) so that a second run
# does not build again; --purge deletes it. Everything else started here
# (engine, namespace, proxy, containers, networks, volumes) is removed on
# exit, also on failure or Ctrl-C. Every docker command runs under timeout.
#
# Options: --only a,b (scenarios to run), --min-accuracy X (default 0.85),
# --job-timeout S (one job's deadline, default 300), --lost-timeout S
# (default 60), --state DIR, --purge. See docs/deploy.md.
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
STATE=/var/tmp/shardps-compose-check
SCENARIOS="sync async worker-rejoin server-restart worker-lost"
MIN_ACC=0.85
JOB_TIMEOUT=300
LOST_TIMEOUT=60
PURGE=0
PROJECT=shardps-check
NS=shardps-compose-check
LOGS=$ROOT/runs/compose-check

die() {
    echo "compose-check: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
    --only) SCENARIOS=${2:?--only needs a list}; SCENARIOS=${SCENARIOS//,/ }; shift ;;
    --min-accuracy) MIN_ACC=${2:?--min-accuracy needs a number}; shift ;;
    --job-timeout) JOB_TIMEOUT=${2:?--job-timeout needs seconds}; shift ;;
    --lost-timeout) LOST_TIMEOUT=${2:?--lost-timeout needs seconds}; shift ;;
    --state) STATE=${2:?--state needs a folder}; shift ;;
    --purge) PURGE=1 ;;
    -h | --help) sed -n '2,45p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
done
for s in $SCENARIOS; do
    case " sync async worker-rejoin server-restart worker-lost " in
    *" $s "*) ;;
    *) die "unknown scenario '$s'" ;;
    esac
done
[ "$(id -u)" -eq 0 ] || die "needs root (a network namespace and a Docker engine)"

RUN=$STATE/run # the engine's sockets and state: removed on exit
SOCK=$RUN/docker.sock
export DOCKER_HOST=unix://$SOCK
export COMPOSE_PROJECT_NAME=$PROJECT
PIDS=() # process groups started here, ended on exit

# Every docker and compose command runs under a deadline. --foreground keeps
# it in the script's process group, so that Ctrl-C reaches the command at once
# (plain timeout moves itself into a group of its own).
bounded() {
    timeout --foreground "$@"
}
# Compose v1 is Python: unbuffered, `logs -f` passes each line on as it comes.
export PYTHONUNBUFFERED=1

# --- requirements -----------------------------------------------------------
need=()
for pair in dockerd:docker.io docker:docker.io docker-compose:docker-compose debootstrap:debootstrap \
    socat:socat tinyproxy:tinyproxy nsenter:util-linux ip:iproute2; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "compose-check: installing ${need[*]}"
    bounded 300 apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive bounded 900 apt-get install -y -qq --no-install-recommends \
        "${need[@]}" >/dev/null || die "apt-get install ${need[*]} failed"
fi
if bounded 20 docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
else
    COMPOSE=(docker-compose)
fi

# Compose, run where the compose file is (it reads .env there), bounded.
dc() {
    local secs=$1
    shift
    (cd "$ROOT/deploy" && bounded "$secs" "${COMPOSE[@]}" -f docker-compose.yml "$@")
}

# --- start and stop the engine ------------------------------------------------
OWN=0 # 1 once the namespace is this run's: only then is there ours to remove
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [ "$OWN" = 1 ] || exit $rc
    if [ -S "$SOCK" ]; then
        dc 120 down -v --remove-orphans -t 10 >/dev/null 2>&1
        # Anything left over in this private engine is ours.
        local left
        left=$(bounded 30 docker ps -aq 2>/dev/null)
        [ -z "$left" ] || bounded 60 docker rm -f $left >/dev/null 2>&1
        bounded 60 docker volume prune -f >/dev/null 2>&1
        bounded 60 docker network prune -f >/dev/null 2>&1
    fi
    if [ -f "$RUN/dockerd.pid" ]; then
        local pid
        pid=$(cat "$RUN/dockerd.pid")
        kill "$pid" 2>/dev/null
        bounded 60 tail --pid="$pid" -f /dev/null || kill -9 "$pid" 2>/dev/null
    fi
    for pg in "${PIDS[@]}"; do
        kill -- "-$pg" 2>/dev/null
    done
    ip netns del "$NS" 2>/dev/null
    # dockerd leaves its namespace file bind-mounted under its exec root.
    awk -v run="$RUN/" 'index($2, run) == 1 {print $2}' /proc/mounts | sort -r |
        xargs -r umount 2>/dev/null
    rm -rf "$RUN"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The namespace is also the lock: a second run, or the remains of one that
# was killed (SIGKILL), stops this one here.
ip netns add "$NS" || die "cannot create network namespace $NS: if it exists, another \
compose-check runs, or one was killed (then remove it with 'ip netns del $NS' and end the \
dockerd in $RUN/dockerd.pid)"
OWN=1
if [ "$PURGE" = 1 ] && [ -d "$STATE" ]; then
    echo "compose-check: deleting $STATE"
    rm -rf "$STATE"
fi
mkdir -p "$STATE/data" "$RUN" "$LOGS"
ip -n "$NS" link set lo up

# setsid: each helper process leads its own group, ended as one on exit.
started() {
    PIDS+=("$!")
}
setsid nsenter --net="/run/netns/$NS" dockerd --iptables=false --ip6tables=false \
    --data-root "$STATE/data" --exec-root "$RUN/exec" --pidfile "$RUN/dockerd.pid" \
    -H "$DOCKER_HOST" >"$RUN/dockerd.log" 2>&1 &
started
if ! bounded 60 bash -c 'until docker version >/dev/null 2>&1; do sleep 0.5; done'; then
    tail -5 "$RUN/dockerd.log" >&2
    die "dockerd did not answer within 60 s"
fi
GW=$(ip -n "$NS" -4 -o addr show docker0 | awk '{print $4}' | cut -d/ -f1)
[ -n "$GW" ] || die "dockerd made no docker0 bridge in $NS"

# The proxy: tinyproxy on the host's loopback (a port outside the ephemeral
# range that is free now), a Unix socket, and a listener on the namespace's
# bridge address where build containers reach it.
PORT=
for p in $(seq 3130 3199); do
    if ! ss -Hltn "sport = :$p" | grep -q .; then
        PORT=$p
        break
    fi
done
[ -n "$PORT" ] || die "no free port in 3130-3199 for the proxy"
printf 'Port %s\nListen 127.0.0.1\nAllow 127.0.0.1\nTimeout 600\nMaxClients 64\nLogLevel Warning\n' \
    "$PORT" >"$RUN/tinyproxy.conf"
setsid tinyproxy -d -c "$RUN/tinyproxy.conf" >"$RUN/tinyproxy.log" 2>&1 &
started
setsid socat "UNIX-LISTEN:$RUN/proxy.sock,fork" "TCP:127.0.0.1:$PORT" 2>"$RUN/socat-host.log" &
started
setsid nsenter --net="/run/netns/$NS" socat "TCP-LISTEN:3142,bind=$GW,reuseaddr,fork" \
    "UNIX-CONNECT:$RUN/proxy.sock" 2>"$RUN/socat-ns.log" &
started
PROXY=http://$GW:3142

# --- images -----------------------------------------------------------------
t0=$SECONDS
if ! bounded 30 docker image inspect debian:12-slim >/dev/null 2>&1; then
    if [ ! -f "$STATE/bookworm-minbase.tar" ]; then
        echo "compose-check: debootstrap --variant=minbase bookworm (a few minutes)"
        rm -rf "$STATE/rootfs"
        bounded 1200 debootstrap --variant=minbase bookworm "$STATE/rootfs" \
            http://deb.debian.org/debian >"$LOGS/debootstrap.log" 2>&1 ||
            die "debootstrap failed (see $LOGS/debootstrap.log)"
        tar -C "$STATE/rootfs" -cf "$STATE/bookworm-minbase.tar" . || die "cannot pack the tree"
        rm -rf "$STATE/rootfs"
    fi
    bounded 300 docker import "$STATE/bookworm-minbase.tar" debian:12-slim >/dev/null ||
        die "docker import failed"
fi
bounded 30 docker tag debian:12-slim debian:12 || die "docker tag failed"
echo "compose-check: building the image with ${COMPOSE[*]} build"
if ! dc 2400 build --build-arg "http_proxy=$PROXY" >"$LOGS/build.log" 2>&1; then
    tail -20 "$LOGS/build.log" >&2
    die "the image did not build (see $LOGS/build.log)"
fi
echo "compose-check: images ready in $((SECONDS - t0)) s"

# --- helpers for the scenarios ------------------------------------------------
cid() { # service -> container id, stopped or not (v2's ps needs -a for that)
    dc 60 ps -a -q "$1"
}
# The service's log lines, without compose's "name | " prefix (and without
# anything else compose prints, which has no such prefix).
log_of() {
    dc 60 logs --no-color "$1" 2>/dev/null | awk '/\| / { sub(/^[^|]*\| /, ""); print }'
}
# Prints the first line the service logs, after its first $3 lines, that
# matches the ERE $2, as soon as it is logged; fails after $4 seconds. Read by
# bash line by line: mawk would wait for a full block before matching.
wait_log() {
    local svc=$1 re=$2 skip=$3 secs=$4 fd pid line n=0 rc=1
    exec {fd}< <(cd "$ROOT/deploy" &&
        exec timeout --foreground "$secs" "${COMPOSE[@]}" -f docker-compose.yml \
            logs -f --no-color "$svc" 2>/dev/null)
    pid=$!
    while IFS= read -r -u "$fd" line; do
        [[ $line == *"| "* ]] || continue
        line=${line#*| }
        n=$((n + 1))
        if [ "$n" -gt "$skip" ] && [[ $line =~ $re ]]; then
            echo "$line"
            rc=0
            break
        fi
    done
    kill "$pid" 2>/dev/null
    exec {fd}<&-
    return $rc
}
exit_code() {
    bounded 30 docker inspect -f '{{.State.ExitCode}}' "$1"
}
# Rank 0's last test accuracy.
accuracy() {
    log_of w0 | sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' | tail -n 1
}
step_of() { # a worker progress line -> its step
    sed -n 's/.* step \([0-9]*\)\/[0-9]*.*/\1/p' <<<"$1"
}
at_least() {
    awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'
}

REASON=
fail() {
    REASON=$*
    return 1
}
# Waits for the whole job to end (every container stopped within the
# deadline) and checks every exit code and rank 0's accuracy.
job_ends_well() {
    local ids
    ids=$(dc 60 ps -a -q)
    bounded "$JOB_TIMEOUT" docker wait $ids >/dev/null ||
        fail "the job did not end within $JOB_TIMEOUT s" || return 1
    for svc in ps0 ps1 w0 w1; do
        local code
        code=$(exit_code "$(cid "$svc")")
        [ "$code" = 0 ] || fail "$svc exited with $code" || return 1
    done
    local acc
    acc=$(accuracy)
    [ -n "$acc" ] || fail "rank 0 reported no test accuracy" || return 1
    at_least "$acc" "$MIN_ACC" || fail "test accuracy $acc is below $MIN_ACC" || return 1
    REASON="test accuracy $acc"
}
# The job's first progress line from w1: the job is under way. (Called in
# $(...), so the callers set the reason.)
mid_run() {
    wait_log w1 ' step [0-9]+/[0-9]+ loss' 0 "$JOB_TIMEOUT"
}

# --- scenarios ---------------------------------------------------------------
scenario_sync() {
    job_ends_well
}
scenario_async() {
    scenario_sync
}
scenario_worker_rejoin() {
    local line step skip start
    line=$(mid_run) || fail "w1 logged no progress within $JOB_TIMEOUT s" || return 1
    step=$(step_of "$line")
    skip=$(log_of w1 | wc -l)
    dc 60 kill -s SIGKILL w1 >/dev/null 2>&1 || fail "compose kill w1 failed" || return 1
    dc 60 start w1 >/dev/null 2>&1 || fail "compose start w1 failed" || return 1
    line=$(wait_log w1 'starting at step [0-9]+' "$skip" 120) ||
        fail "the restarted w1 did not connect within 120 s" || return 1
    start=$(sed -n 's/.*starting at step \([0-9]*\).*/\1/p' <<<"$line")
    [ "$start" -ge "$step" ] ||
        fail "the restarted w1 started at step $start, before step $step it had reached" || return 1
    job_ends_well || return 1
    REASON="w1 killed after step $step came back at step $start; $REASON"
}
scenario_server_restart() {
    local line step skip id started ckpt restored rejoin reset=
    line=$(mid_run) || fail "w1 logged no progress within $JOB_TIMEOUT s" || return 1
    step=$(step_of "$line")
    skip=$(log_of ps1 | wc -l)
    dc 120 restart -t 60 ps1 >/dev/null 2>&1 || fail "compose restart ps1 failed" || return 1
    wait_log ps1 'listening on' "$skip" 120 >/dev/null ||
        fail "ps1 did not listen again within 120 s" || return 1
    # The container's two runs, split where the second started: what the
    # first checkpointed on SIGTERM, what the second restored.
    id=$(cid ps1)
    started=$(bounded 30 docker inspect -f '{{.State.StartedAt}}' "$id")
    ckpt=$(bounded 60 docker logs --until "$started" "$id" 2>&1 |
        sed -n 's/.*checkpoint (.*) at clock \([0-9]*\).*/\1/p' | tail -n 1)
    restored=$(bounded 60 docker logs --since "$started" "$id" 2>&1 |
        sed -n 's/.*restored clock \([0-9]*\).*/\1/p' | tail -n 1)
    if [ -z "$ckpt" ]; then
        reset="ps1 wrote no checkpoint when stopped after the job's step $step"
    elif [ -z "$restored" ]; then
        reset="ps1 came back at clock 0 with fresh weights (its new run restored nothing; \
it had checkpointed clock $ckpt on SIGTERM, after the job's step $step)"
    elif [ "$restored" -lt "$ckpt" ]; then
        reset="ps1 came back at clock $restored, behind the clock $ckpt it checkpointed on SIGTERM"
    fi
    if [ -n "$reset" ]; then
        # Let the job run out all the same, to record where the reset leads.
        job_ends_well
        rejoin=$(log_of w0 | sed -n 's/.*rejoined at step \([0-9]*\).*/\1/p' | tail -n 1)
        REASON="$reset; w0 rejoined at step ${rejoin:-(none logged)}; then: $REASON"
        return 1
    fi
    job_ends_well || return 1
    rejoin=$(log_of w0 | sed -n 's/.*rejoined at step \([0-9]*\).*/\1/p' | tail -n 1)
    [ -z "$rejoin" ] || [ "$rejoin" -ge "$ckpt" ] ||
        fail "w0 rejoined at step $rejoin, behind ps1's restored clock $ckpt" || return 1
    REASON="ps1 restarted after step $step restored clock $restored; $REASON"
}
scenario_worker_lost() {
    local line step w0 servers
    line=$(mid_run) || fail "w1 logged no progress within $JOB_TIMEOUT s" || return 1
    step=$(step_of "$line")
    dc 60 kill -s SIGKILL w1 >/dev/null 2>&1 || fail "compose kill w1 failed" || return 1
    w0=$(cid w0)
    bounded "$JOB_TIMEOUT" docker wait "$w0" >/dev/null ||
        fail "w0 did not finish within $JOB_TIMEOUT s of losing w1" || return 1
    [ "$(exit_code "$w0")" = 0 ] || fail "w0 exited with $(exit_code "$w0")" || return 1
    servers="$(cid ps0) $(cid ps1)"
    bounded "$LOST_TIMEOUT" docker wait $servers >/dev/null ||
        fail "w1 was killed after step $step and w0 finished, but the servers still run \
$LOST_TIMEOUT s later (waiting for rank 1 to rejoin, forever)" || return 1
    for svc in ps0 ps1; do
        [ "$(exit_code "$(cid "$svc")")" = 0 ] ||
            fail "$svc exited with $(exit_code "$(cid "$svc")") after losing w1" || return 1
    done
    REASON="w1 killed after step $step; w0 finished and the servers ended the job"
}

passed=0
failed=0
for s in $SCENARIOS; do
    mode=sync
    [ "$s" = async ] && mode=async
    dc 120 down -v --remove-orphans -t 10 >/dev/null 2>&1
    t=$SECONDS
    REASON=
    if ! SHARDPS_MODE=$mode dc 120 up -d --no-build >"$LOGS/$s.up.log" 2>&1; then
        REASON="compose up failed: $(tail -n 1 "$LOGS/$s.up.log")"
        ok=1
    else
        "scenario_${s//-/_}"
        ok=$?
    fi
    dc 60 logs --no-color -t >"$LOGS/$s.log" 2>&1
    # --timestamps (-t) order the services' lines by time in the saved log.
    if [ "$ok" = 0 ]; then
        echo "PASS $s ($((SECONDS - t)) s, mode $mode): $REASON"
        passed=$((passed + 1))
    else
        echo "FAIL $s ($((SECONDS - t)) s, mode $mode): $REASON"
        failed=$((failed + 1))
    fi
    dc 180 down -v --remove-orphans -t 60 >/dev/null 2>&1
done
echo "compose-check: logs in ${LOGS#"$ROOT"/}/"
echo "compose-check: $passed passed, $failed failed"
[ "$failed" = 0 ]
