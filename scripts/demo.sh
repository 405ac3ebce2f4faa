#!/usr/bin/env bash
# make demo: add-on delivery end to end on one machine. It starts
#   - saltbush (embedded etcd in a temporary directory),
#   - a real Kubernetes control plane: kube-apiserver, kube-controller-manager
#     and kube-scheduler on an embedded etcd (tests/kubetest),
#   - the kubelet double: THE ONE SIMULATED PART. It plays the cluster's node,
#     marking pods Running and Ready as a kubelet would; no container runs,
#   - the real saltbush-agent as the cluster's control-plane member,
# and walks coredns through CREATING -> ACTIVE -> updated -> deleted with the
# AWS CLI, printing each status. Everything stops when the script ends.
# Pointing the agent at a real K3s server instead: docs/agent.md.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/saltbush-demo.XXXXXX")
PIDS=()
cleanup() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo; echo "demo failed; logs were in $WORK (saltbush.log, kube.log, agent.log):"; tail -n 20 "$WORK"/*.log 2>/dev/null || true' ERR

say "building saltbush, saltbush-agent and the Kubernetes control plane (cached after the first time)"
make --no-print-directory build kube
go build -o bin/saltbush-agent ./cmd/saltbush-agent
go build -o "$WORK/kubecluster" ./tests/demo/kubecluster

say "starting the Kubernetes control plane (real apiserver, controller manager, scheduler; kubelet double)"
mkdir -p "$WORK/kube"
SALTBUSH_KUBE_BIN="$PWD/bin/kube" "$WORK/kubecluster" --dir "$WORK/kube" >"$WORK/kube.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 600); do [ -f "$WORK/kube/ready" ] && break; sleep 0.5; done
[ -f "$WORK/kube/ready" ] || { echo "the control plane did not start"; exit 1; }
grep "control plane at" "$WORK/kube.log"

say "starting saltbush"
HTTP="127.0.0.1:$(free_port)"
GRPC="127.0.0.1:$(free_port)"
bin/saltbush serve --data-dir "$WORK/data" --http-addr "$HTTP" --grpc-addr "$GRPC" >"$WORK/saltbush.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 240); do curl -fs "http://$HTTP/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
curl -fs "http://$HTTP/readyz" >/dev/null || { echo "saltbush did not become ready"; exit 1; }
echo "façade http://$HTTP, gRPC $GRPC"

export AWS_CONFIG_FILE="$WORK/data/aws/config" AWS_SHARED_CREDENTIALS_FILE="$WORK/data/aws/credentials" AWS_PROFILE=saltbush
EKS="aws eks --endpoint-url http://$HTTP"
ADMIN="bin/saltbush admin --grpc-addr $GRPC --tls-dir $WORK/data/pki"

say "creating cluster demo; the provisioner's part by hand: a member, then ACTIVE"
$EKS create-cluster --name demo --role-arn arn:aws:iam::000000000000:role/eks \
	--resources-vpc-config subnetIds=subnet-a --query cluster.status --output text
CLUSTER_UID=$($ADMIN cluster add-member demo i-demo0 | python3 -c 'import json,sys; print(json.load(sys.stdin)["cluster"]["uid"])')
$ADMIN cluster set-status demo ACTIVE --endpoint "$(cat "$WORK/kube/host")" --ca-file "$WORK/kube/ca.crt" >/dev/null
$EKS describe-cluster --name demo --query cluster.status --output text

say "starting the guest agent for member i-demo0"
$ADMIN cert issue --agent "$CLUSTER_UID/i-demo0" --out-dir "$WORK/agent" >/dev/null
AGENT_STATUS="127.0.0.1:$(free_port)"
bin/saltbush-agent run --config "" \
	--account-id 000000000000 --cluster-name demo --cluster-uid "$CLUSTER_UID" --instance-id i-demo0 \
	--endpoint "$GRPC" --cert "$WORK/agent/agent-i-demo0.crt" --key "$WORK/agent/agent-i-demo0.key" \
	--ca "$WORK/agent/ca.crt" --kubeconfig "$WORK/kube/kubeconfig" --state-dir "$WORK/agent/state" \
	--status-addr "$AGENT_STATUS" --webhook-addr "" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 120); do bin/saltbush-agent status --status-addr "$AGENT_STATUS" 2>/dev/null | grep -q 'EXECUTOR' && break; sleep 0.5; done
bin/saltbush-agent status --status-addr "$AGENT_STATUS"

# watch prints each new status of the add-on until it is $1 (or gone).
watch() {
	local want=$1 last="" now
	for _ in $(seq 1 600); do
		now=$($EKS describe-addon --cluster-name demo --addon-name coredns --query addon.status --output text 2>/dev/null || echo GONE)
		[ "$now" != "$last" ] && echo "  coredns: $now" && last=$now
		[ "$now" = "$want" ] && return 0
		sleep 0.3
	done
	echo "coredns never became $want"; return 1
}

say "create-addon coredns with configurationValues {\"replicaCount\": 1}"
$EKS create-addon --cluster-name demo --addon-name coredns --configuration-values '{"replicaCount": 1}' --query addon.status --output text
watch ACTIVE
$EKS describe-addon --cluster-name demo --addon-name coredns --query 'addon.{version:addonVersion,status:status,health:health}'

say "update-addon coredns with {\"replicaCount\": 2}"
read -r UPDATE_ID UPDATE_STATUS < <($EKS update-addon --cluster-name demo --addon-name coredns \
	--configuration-values '{"replicaCount": 2}' --query '[update.id, update.status]' --output text)
echo "update $UPDATE_ID: $UPDATE_STATUS"
watch ACTIVE
$EKS describe-update --name demo --addon-name coredns --update-id "$UPDATE_ID" --query 'update.{type:type,status:status}'
bin/saltbush-agent status --status-addr "$AGENT_STATUS"

say "delete-addon coredns"
$EKS delete-addon --cluster-name demo --addon-name coredns --query addon.status --output text
watch GONE
$ADMIN delivery status demo | python3 -c 'import json,sys; d=json.load(sys.stdin); print("executor", d["executor"]["instanceId"], "epoch", d["executor"]["epoch"])'

say "done: coredns went CREATING -> ACTIVE -> UPDATING -> ACTIVE -> DELETING -> gone, applied by the real agent"
