#!/usr/bin/env bash
# The deploy files, checked where they cannot run (no Docker engine or
# Kubernetes here): the compose file and the manifests pass yamllint, the
# compose file passes `docker-compose config` and SHARDPS_MODE reaches every
# service, and the cluster files agree with what deploys them: server names,
# ports, counts and ranks in the ConfigMap against the Service, StatefulSet
# and Job; in compose/cluster.ini against the compose services. Last, the real
# programs read each cluster file and derive the intended listen addresses,
# and the systemd units pass systemd-analyze verify where it exists, and
# deploy/compose-check.sh (`make compose-check`) parses. Operations
# defaults: every server resumes its job (--restore auto), and
# authentication is on everywhere (a token made by compose's one-shot
# service, a Kubernetes Secret, a systemd credential), crashed workers are
# restarted.
# Skipped (exit 77) when yamllint, docker-compose or PyYAML is missing
# (deploy/install-deps.sh installs them).
source "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DEPLOY="$SRC/deploy"

for tool in yamllint docker-compose python3; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (deploy/install-deps.sh)"; exit 77; }
done
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: PyYAML is not installed (python3-yaml)"; exit 77; }

# The compose check itself needs a Docker engine; here it is only parsed.
bash -n "$DEPLOY/compose-check.sh" || fail "deploy/compose-check.sh does not parse"

yamllint -s -c "$SRC/.yamllint" "$DEPLOY/docker-compose.yml" "$DEPLOY/k8s" ||
    fail "yamllint found problems in the deploy files"

# `config` resolves anchors, variables and .env without an engine. Output goes
# to a file: the checks below read the resolved form.
(cd "$DEPLOY" && docker-compose -f docker-compose.yml config >"$TMP/compose.yml" 2>"$TMP/compose.err") ||
    { cat "$TMP/compose.err" >&2; fail "docker-compose config rejected deploy/docker-compose.yml"; }
# One mode is enough to show the variable reaches every service; each
# docker-compose run costs seconds.
for mode in ssp; do
    (cd "$DEPLOY" && SHARDPS_MODE=$mode docker-compose -f docker-compose.yml config >"$TMP/mode.yml") ||
        fail "docker-compose config failed with SHARDPS_MODE=$mode"
    services=$(grep -c '^  [a-z0-9-]*:$' "$TMP/mode.yml" || true)
    got=$(grep -c "SHARDPS_MODE: $mode\$" "$TMP/mode.yml" || true)
    [ "$got" -eq "$services" ] && [ "$got" -gt 0 ] ||
        fail "SHARDPS_MODE=$mode reached $got of $services compose services"
done

# Structure: prints shell assignments for the checks that need the programs.
python3 - "$DEPLOY" "$TMP" >"$TMP/facts" <<'EOF' || fail "the deploy files disagree (see above)"
import configparser, glob, os, sys, yaml

deploy, tmp = sys.argv[1], sys.argv[2]
bad = []

def check(ok, what):
    if not ok:
        bad.append(what)

def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}

def servers_of(ini_text):
    ini = configparser.ConfigParser(inline_comment_prefixes=(";",))
    ini.read_string(ini_text)
    return ini, [s.strip() for s in ini["cluster"]["servers"].split(",")]

# Kubernetes: every object of the manifests, by kind.
docs = {}
for path in sorted(glob.glob(os.path.join(deploy, "k8s", "*.yaml"))):
    for doc in yaml.safe_load_all(open(path)):
        if doc and doc.get("kind") != "Kustomization":
            docs[doc["kind"]] = doc
kust = yaml.safe_load(open(os.path.join(deploy, "k8s", "kustomization.yaml")))
manifests = sorted(os.path.basename(p) for p in glob.glob(os.path.join(deploy, "k8s", "*.yaml")))
check(sorted(kust["resources"]) == [m for m in manifests if m != "kustomization.yaml"],
      "kustomization.yaml does not list every manifest")
cm, svc, sts, job = (docs.get(k) for k in ("ConfigMap", "Service", "StatefulSet", "Job"))
check(None not in (cm, svc, sts, job), "a ConfigMap, Service, StatefulSet and Job are expected")
ini, servers = servers_of(cm["data"]["cluster.ini"])
open(os.path.join(tmp, "k8s.ini"), "w").write(cm["data"]["cluster.ini"])
port = svc["spec"]["ports"][0]["port"]
check(svc["spec"].get("clusterIP") == "None", "the server Service must be headless")
check(sts["spec"]["serviceName"] == svc["metadata"]["name"], "StatefulSet serviceName != Service")
check(sts["spec"]["template"]["metadata"]["labels"].items() >= svc["spec"]["selector"].items(),
      "the Service's selector does not select the server pods")
want = ["%s-%d.%s:%d" % (sts["metadata"]["name"], i, svc["metadata"]["name"], port)
        for i in range(sts["spec"]["replicas"])]
check(servers == want, "ConfigMap servers %s, manifests give %s" % (servers, want))
server = sts["spec"]["template"]["spec"]["containers"][0]
cport = {p["name"]: p["containerPort"] for p in server["ports"]}
check(cport.get(svc["spec"]["ports"][0]["targetPort"]) == port,
      "the Service port %d does not reach the container port %s" % (port, cport))
listen = env_of(server)["SHARDPS_LISTEN"]["value"]
check(listen.rsplit(":", 1)[1] == str(port), "SHARDPS_LISTEN %s is not on port %d" % (listen, port))
workers = int(ini["cluster"]["workers"])
check(job["spec"]["completionMode"] == "Indexed", "the worker Job must be Indexed")
check(job["spec"]["completions"] == workers == job["spec"]["parallelism"],
      "Job completions/parallelism %s/%s, cluster file workers %d"
      % (job["spec"]["completions"], job["spec"]["parallelism"], workers))
worker = job["spec"]["template"]["spec"]["containers"][0]
rank = env_of(worker)["SHARDPS_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
check("job-completion-index" in rank, "SHARDPS_RANK does not come from the completion index")
for pod, c in ((sts, server), (job, worker)):
    path = env_of(c)["SHARDPS_CLUSTER"]["value"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v.get("configMap", {}).get("name") for v in pod["spec"]["template"]["spec"]["volumes"]}
    check(any(vols.get(n) == cm["metadata"]["name"] and os.path.join(p, "cluster.ini") == path
              for n, p in mounts.items()),
          "%s does not mount the ConfigMap at %s" % (pod["kind"], path))
# Operations defaults: restore auto on servers, the token from a Secret.
check(env_of(server).get("SHARDPS_RESTORE", {}).get("value") == "auto",
      "the servers do not default to --restore auto")
for pod, c in ((sts, server), (job, worker)):
    tok = env_of(c).get("SHARDPS_AUTH_TOKEN_FILE", {}).get("value", "")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    secrets = {v["name"]: v.get("secret", {}).get("secretName")
               for v in pod["spec"]["template"]["spec"]["volumes"]}
    check(any(secrets.get(n) == "shardps-token" and tok == os.path.join(p, "token")
              for n, p in mounts.items()),
          "%s does not read its auth token from the Secret shardps-token" % pod["kind"])
print("K8S_SERVERS=%d K8S_LISTEN=%s K8S_WORKERS=%d" % (len(want), listen, workers))

# Compose, resolved by docker-compose config.
compose = yaml.safe_load(open(os.path.join(tmp, "compose.yml")))["services"]
ini, servers = servers_of(open(os.path.join(deploy, "compose", "cluster.ini")).read())
env = {n: s.get("environment", {}) for n, s in compose.items()}
by_index = sorted((int(e["SHARDPS_SERVER_INDEX"]), n) for n, e in env.items() if "SHARDPS_SERVER_INDEX" in e)
check([i for i, _ in by_index] == list(range(len(by_index))), "server indices are not 0..S-1")
check([s.rsplit(":", 1)[0] for s in servers] == [n for _, n in by_index],
      "compose/cluster.ini servers %s, compose server services %s" % (servers, by_index))
workers = int(ini["cluster"]["workers"])
for profile in ("cpu", "gpu"):
    ranks = sorted(int(e["SHARDPS_RANK"]) for n, e in env.items()
                   if "SHARDPS_RANK" in e and profile in compose[n].get("profiles", []))
    check(ranks == list(range(workers)), "profile %s runs ranks %s for %d workers" % (profile, ranks, workers))
# The one-shot token service: every server and worker waits for it and
# reads the token from the volume it wrote.
token = compose.get("token")
check(token is not None and token.get("restart") == "no", "no one-shot compose service 'token'")
token_vol = [str(v).split(":")[0] for v in (token or {}).get("volumes", [])]
for n, s in compose.items():
    if n == "token":
        continue
    dep = s.get("depends_on", {})
    check(isinstance(dep, dict) and dep.get("token", {}).get("condition") ==
          "service_completed_successfully", "%s does not wait for the token service" % n)
    path = env[n].get("SHARDPS_AUTH_TOKEN_FILE", "")
    check(any(str(v).startswith(token_vol[0] + ":" + os.path.dirname(path)) for v in s.get("volumes", []))
          if token_vol and path else False, "%s does not read the token service's volume" % n)
    check(str(s.get("restart", "")).startswith("on-failure"), "%s is not restarted on failure" % n)
    if "SHARDPS_SERVER_INDEX" in env[n]:
        check(env[n].get("SHARDPS_RESTORE") == "auto", "%s does not default to --restore auto" % n)
for n, s in compose.items():
    if n == "token":
        continue
    mounted = [v for v in s.get("volumes", []) if str(v).endswith(":/etc/shardps/cluster.ini:ro")]
    check(len(mounted) == 1 and mounted[0].startswith(os.path.join(deploy, "compose", "cluster.ini")),
          "%s does not mount compose/cluster.ini read-only" % n)
    check(env[n].get("SHARDPS_CLUSTER") == "/etc/shardps/cluster.ini", "%s: SHARDPS_CLUSTER" % n)
print("COMPOSE_SERVERS='%s'" % " ".join(servers))

for b in bad:
    print("deploy files: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
eval "$(cat "$TMP/facts")"

# The programs themselves read each file as the pods and containers would.
value() { # print-config output, option name -> its value
    awk -v k="$2" '$1 == k && $2 == "=" {print $3}' "$1"
}
for i in $(seq 0 $((K8S_SERVERS - 1))); do
    SHARDPS_LISTEN=$K8S_LISTEN "$BUILD/shardps-server" --cluster "$TMP/k8s.ini" --server-index "$i" \
        --print-config >"$TMP/pc" || fail "shardps-server cannot read the ConfigMap's cluster file"
    [ "$(value "$TMP/pc" num-servers)" = "$K8S_SERVERS" ] || fail "k8s server $i: num-servers"
    [ "$(value "$TMP/pc" listen)" = "$K8S_LISTEN" ] || fail "k8s server $i: listen"
done
SHARDPS_RANK=$((K8S_WORKERS - 1)) "$BUILD/shardps-worker" --cluster "$TMP/k8s.ini" --print-config \
    >"$TMP/pc" || fail "shardps-worker cannot read the ConfigMap's cluster file"
i=0
for entry in $COMPOSE_SERVERS; do
    SHARDPS_SERVER_INDEX=$i "$BUILD/shardps-server" --cluster "$DEPLOY/compose/cluster.ini" \
        --print-config >"$TMP/pc" || fail "shardps-server cannot read compose/cluster.ini"
    [ "$(value "$TMP/pc" listen)" = "$entry" ] || fail "compose server $i would not listen on $entry"
    i=$((i + 1))
done
"$BUILD/shardps-worker" --cluster "$DEPLOY/compose/cluster.ini" --print-config >/dev/null ||
    fail "shardps-worker cannot read compose/cluster.ini"
# --restore auto reads back from the environment, as the deploy files set it.
SHARDPS_RESTORE=auto "$BUILD/shardps-server" --print-config >"$TMP/pc" ||
    fail "shardps-server refuses SHARDPS_RESTORE=auto"
[ "$(value "$TMP/pc" restore)" = auto ] || fail "SHARDPS_RESTORE=auto does not read back as auto"
# The systemd units: restore auto, the token as a credential (made by the
# server unit if absent).
for unit in server worker; do
    f="$DEPLOY/systemd/shardps-$unit@.service"
    grep -q '^LoadCredential=token:/etc/shardps/token$' "$f" &&
        grep -q '^Environment=SHARDPS_AUTH_TOKEN_FILE=%d/token$' "$f" ||
        fail "shardps-$unit@.service does not read the token /etc/shardps/token"
done
grep -q '^Environment=SHARDPS_RESTORE=auto$' "$DEPLOY/systemd/shardps-server@.service" ||
    fail "shardps-server@.service does not default to --restore auto"
grep -q '^ExecStartPre=+.*/etc/shardps/token' "$DEPLOY/systemd/shardps-server@.service" ||
    fail "shardps-server@.service does not make the token when it is absent"
# The systemd units, where systemd-analyze exists: pointed at this build's
# programs, `verify` must have nothing to say.
if command -v systemd-analyze >/dev/null; then
    for unit in server worker; do
        sed "s|/usr/local/bin/|$BUILD/|" "$DEPLOY/systemd/shardps-$unit@.service" \
            >"$TMP/shardps-$unit@0.service"
        out=$(cd "$TMP" && systemd-analyze verify --man=no "./shardps-$unit@0.service" 2>&1) ||
            true
        [ -z "$out" ] || { echo "$out" >&2; fail "systemd-analyze verify: shardps-$unit@.service"; }
    done
fi
echo "PASS: deploy files lint clean, compose config resolves, cluster files match the manifests"
