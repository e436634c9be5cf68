# Network namespaces as separate hosts, for the integration tests that need
# real addresses: a hub namespace holding a bridge, and one namespace per
# host, each linked to the hub by a veth pair and given its own address in
# 10.231.0.0/24, a subnet that exists only inside these namespaces (so fixed
# ports are ours to pick). Names carry the test's PID, so parallel ctest runs
# never clash; processes and namespaces are removed on exit, even on failure.
# Source it after lib.sh; without root or without permission to create
# namespaces the test exits 77, which ctest reports as Skipped.

NS_PREFIX="shardps-t-$$"
NS_HUB="$NS_PREFIX-hub"
NS_CREATED=()
NS_PIDS=()
# Every process runs under timeout(1): if the test itself is killed before its
# trap runs, nothing it started outlives this bound. --foreground makes
# timeout pass a signal we send on to the program once; without it timeout
# also signals its process group, and the second SIGTERM can reach a server
# after it has closed its handlers during shutdown, killing it (exit 143).
NS_LIMIT=${NS_LIMIT:-150}

skip() {
    echo "SKIP: $*"
    exit 77
}

ns_cleanup() {
    local pid ns
    for pid in "${NS_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${NS_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    for ns in "${NS_CREATED[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap ns_cleanup EXIT

# Creates the hub, or skips the test saying why it cannot.
ns_setup() {
    local err ns owner
    [ "$(id -u)" -eq 0 ] || skip "network namespaces need root (ip netns add); run the tests as root"
    command -v ip >/dev/null || skip "iproute2's ip is not installed (deploy/install-deps.sh adds it)"
    # Namespaces left by an earlier run that was killed before its trap ran.
    for ns in $(ip netns list 2>/dev/null | awk '/^shardps-t-[0-9]+-/ {print $1}'); do
        owner=${ns#shardps-t-}
        owner=${owner%%-*}
        kill -0 "$owner" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
    done
    err=$(ip netns add "$NS_HUB" 2>&1) || skip "cannot create a network namespace here: $err"
    NS_CREATED+=("$NS_HUB")
    err=$(ip -n "$NS_HUB" link add br0 type bridge 2>&1) || skip "cannot create a bridge: $err"
    ip -n "$NS_HUB" link set br0 up
}

# ns_host NAME ADDRESS: a namespace "host" NAME with ADDRESS on its eth0,
# plugged into the hub's bridge through the hub-side interface "vNAME".
ns_host() {
    local ns="$NS_PREFIX-$1"
    ip netns add "$ns"
    NS_CREATED+=("$ns")
    ip link add eth0 netns "$ns" type veth peer name "v$1" netns "$NS_HUB"
    ip -n "$NS_HUB" link set "v$1" master br0 up
    ip -n "$ns" addr add "$2/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
}

# ns_cut NAME: unplugs host NAME; its packets are dropped from now on, with
# no reset or error for anyone, as when a cable or a switch port dies.
ns_cut() {
    ip -n "$NS_HUB" link set "v$1" down
}

# ns_run NAME COMMAND...: runs COMMAND in the background on host NAME (the
# caller's redirections apply); its PID is left in NS_LAST.
ns_run() {
    local ns="$NS_PREFIX-$1"
    shift
    timeout --foreground -k 5 "$NS_LIMIT" ip netns exec "$ns" "$@" &
    NS_LAST=$!
    NS_PIDS+=("$NS_LAST")
}
