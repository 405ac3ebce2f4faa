#!/usr/bin/env bash
# make demo: add-on delivery and cluster access end to end on one machine.
# It starts
#   - saltbush (embedded etcd in a temporary directory),
#   - a real Kubernetes control plane: kube-apiserver, kube-controller-manager
#     and kube-scheduler on an embedded etcd (tests/kubetest), the apiserver
#     configured with the guest agent's authentication and authorization
#     webhooks (the files `saltbush-agent webhook-config` writes before it
#     starts, as on a K3s VM: images/k3s),
#   - the kubelet double: THE ONE SIMULATED PART. It plays the cluster's node,
#     marking pods Running and Ready as a kubelet would; no container runs,
#   - the real saltbush-agent as the cluster's control-plane member,
# walks coredns through CREATING -> ACTIVE -> updated -> deleted with the
# AWS CLI, printing each status, then gives an IAM user Edit on namespace
# dev through an access entry and shows the real kubectl (authenticated by
# `aws eks get-token`) allowed in dev, refused in prod, and refused in dev
# once the policy is disassociated. Everything stops when the script ends;
# with DEMO_KEEP=1 it prints the environment and keeps running until Ctrl-C,
# for trying the README's commands by hand.
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

say "writing the webhooks' kubeconfigs (saltbush-agent webhook-config), before the apiserver starts"
WEBHOOK="127.0.0.1:$(free_port)"
AGENT_FLAGS=(--config "" --state-dir "$WORK/agent/state" --webhook-addr "$WEBHOOK" --webhook-dir "$WORK/agent/webhook")
mapfile -t WEBHOOK_FILES < <(bin/saltbush-agent webhook-config "${AGENT_FLAGS[@]}")
[ "${#WEBHOOK_FILES[@]}" = 2 ] || { echo "saltbush-agent webhook-config printed ${WEBHOOK_FILES[*]}, want two paths"; exit 1; }
printf '  %s\n' "${WEBHOOK_FILES[@]}"
echo "  (the agent will serve both on $WEBHOOK)"

say "starting the Kubernetes control plane (real apiserver, controller manager, scheduler; kubelet double)"
mkdir -p "$WORK/kube"
SALTBUSH_KUBE_BIN="$PWD/bin/kube" "$WORK/kubecluster" --dir "$WORK/kube" \
	--authentication-webhook-config "${WEBHOOK_FILES[0]}" --authorization-webhook-config "${WEBHOOK_FILES[1]}" >"$WORK/kube.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 600); do [ -f "$WORK/kube/ready" ] && break; sleep 0.5; done
[ -f "$WORK/kube/ready" ] || { echo "the control plane did not start"; exit 1; }
grep -e "control plane at" -e "webhooks" "$WORK/kube.log"

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

# The cluster's service range is the test control plane's (tests/kubetest's
# ServiceClusterIPRange): coredns's Service takes its .10 address.
say "creating cluster demo (authenticationMode API: access entries); the provisioner's part by hand: a member, then ACTIVE"
$EKS create-cluster --name demo --role-arn arn:aws:iam::000000000000:role/eks \
	--resources-vpc-config subnetIds=subnet-a --access-config authenticationMode=API \
	--kubernetes-network-config serviceIpv4Cidr=10.96.0.0/16 \
	--query 'cluster.[status, accessConfig.authenticationMode]' --output text
CLUSTER_UID=$($ADMIN cluster add-member demo i-demo0 | python3 -c 'import json,sys; print(json.load(sys.stdin)["cluster"]["uid"])')
$ADMIN cluster set-status demo ACTIVE --endpoint "$(cat "$WORK/kube/host")" --ca-file "$WORK/kube/ca.crt" >/dev/null
$EKS describe-cluster --name demo --query cluster.status --output text

say "starting the guest agent for member i-demo0 (its review cache TTL 2 s here; 5 s by default)"
$ADMIN cert issue --agent "$CLUSTER_UID/i-demo0" --out-dir "$WORK/agent" >/dev/null
AGENT_STATUS="127.0.0.1:$(free_port)"
bin/saltbush-agent run "${AGENT_FLAGS[@]}" --review-cache-ttl 2s \
	--account-id 000000000000 --cluster-name demo --cluster-uid "$CLUSTER_UID" --instance-id i-demo0 \
	--endpoint "$GRPC" --cert "$WORK/agent/agent-i-demo0.crt" --key "$WORK/agent/agent-i-demo0.key" \
	--ca "$WORK/agent/ca.crt" --kubeconfig "$WORK/kube/kubeconfig" \
	--status-addr "$AGENT_STATUS" >"$WORK/agent.log" 2>&1 &
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

echo "coredns went CREATING -> ACTIVE -> UPDATING -> ACTIVE -> DELETING -> gone, applied by the real agent"

# ---- cluster access: access entries decide what kubectl may do ----
KUBECTL="$PWD/bin/kube/kubectl"
ALICE=arn:aws:iam::000000000000:user/alice
EDIT=arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy

say "IAM user alice, an access key, and a policy allowing eks:DescribeCluster (aws eks update-kubeconfig calls it)"
$ADMIN account create-principal "$ALICE" >/dev/null
echo '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:DescribeCluster","Resource":"*"}]}' |
	$ADMIN account put-policy 000000000000 describe-clusters - >/dev/null
$ADMIN account attach-policy "$ALICE" describe-clusters >/dev/null
read -r KEY_ID KEY_SECRET < <($ADMIN account create-key "$ALICE" |
	python3 -c 'import json,sys; k=json.load(sys.stdin); print(k["accessKeyId"], k["secretAccessKey"])')
# Profile alice: her key, and the façade as the endpoint of EKS only (the
# services section saltbush serve wrote for its own profile), so that
# `aws eks get-token` still presigns for STS, locally.
aws configure set --profile alice aws_access_key_id "$KEY_ID"
aws configure set --profile alice aws_secret_access_key "$KEY_SECRET"
aws configure set --profile alice region us-east-1
aws configure set --profile alice services saltbush
echo "$ALICE: access key $KEY_ID (AWS CLI profile alice)"

say "create-access-entry for alice; associate-access-policy AmazonEKSEditPolicy, scope namespace dev"
$EKS create-access-entry --cluster-name demo --principal-arn "$ALICE" \
	--query 'accessEntry.[principalArn, username, type]' --output text
$EKS associate-access-policy --cluster-name demo --principal-arn "$ALICE" --policy-arn "$EDIT" \
	--access-scope type=namespace,namespaces=dev \
	--query 'associatedAccessPolicy.[policyArn, accessScope.type, join(`,`, accessScope.namespaces)]' --output text
echo "access entries of demo:"
$EKS list-access-entries --cluster-name demo --query accessEntries --output text | tr '\t' '\n' | sed 's/^/  /'

say "namespaces dev and prod (as the cluster admin: kubecluster's client-certificate kubeconfig)"
$KUBECTL --kubeconfig "$WORK/kube/kubeconfig" create namespace dev
$KUBECTL --kubeconfig "$WORK/kube/kubeconfig" create namespace prod

say "alice: aws eks update-kubeconfig --name demo (kubectl then runs aws eks get-token as alice)"
AWS_PROFILE=alice aws eks update-kubeconfig --name demo --kubeconfig "$WORK/dev.kubeconfig"
DEV="$KUBECTL --kubeconfig $WORK/dev.kubeconfig --request-timeout 30s"
$DEV auth whoami

# expect_forbidden runs alice's kubectl and prints its refusal; an allowed
# request, or any other failure, fails the demo.
expect_forbidden() {
	local out
	if out=$($DEV "$@" 2>&1); then
		echo "kubectl $* was ALLOWED; the access entry should have refused it:"; echo "$out"; return 1
	fi
	case $out in
	*Forbidden* | *forbidden*) echo "$out" ;;
	*) echo "kubectl $* failed, but not as Forbidden:"; echo "$out"; return 1 ;;
	esac
}

say "alice: kubectl get pods -n dev (Edit on dev: allowed)"
$DEV get pods -n dev

say "alice: kubectl get pods -n prod (no policy covers prod: Forbidden, as expected)"
expect_forbidden get pods -n prod

say "disassociate-access-policy AmazonEKSEditPolicy: dev is refused once the apiserver's 5 s and the agent's 2 s caches expire"
$EKS disassociate-access-policy --cluster-name demo --principal-arn "$ALICE" --policy-arn "$EDIT"
T0=$(date +%s%N)
ALLOWED=0
while out=$($DEV get pods -n dev 2>&1); do
	ALLOWED=$((ALLOWED + 1))
	if [ $(($(date +%s%N) - T0)) -gt 20000000000 ]; then
		echo "alice still allowed in dev 20 s after the disassociation:"; echo "$out"; exit 1
	fi
	sleep 0.2
done
ELAPSED=$(awk -v ns=$(($(date +%s%N) - T0)) 'BEGIN { printf "%.1f", ns / 1e9 }')
case $out in *Forbidden* | *forbidden*) ;; *) echo "kubectl get pods -n dev failed, but not as Forbidden:"; echo "$out"; exit 1 ;; esac
echo "$out"
echo "refused ${ELAPSED} s after the disassociation (each try includes kubectl running aws eks get-token)"
[ "$ALLOWED" = 0 ] || echo "before that, $ALLOWED try/tries still allowed: the agent's cached decision"

say "done: coredns applied by the real agent; alice allowed in dev, refused in prod, refused in dev once the policy went"

if [ "${DEMO_KEEP:-}" = 1 ]; then
	say "DEMO_KEEP=1: everything keeps running until Ctrl-C (then it is all removed). In another terminal:"
	cat <<EOF
cd $PWD
export AWS_CONFIG_FILE=$WORK/data/aws/config AWS_SHARED_CREDENTIALS_FILE=$WORK/data/aws/credentials AWS_PROFILE=saltbush
export KUBECONFIG=$WORK/kube/kubeconfig   # the cluster admin (client certificate)
export PATH=$PWD/bin/kube:$PWD/bin:\$PATH    # kubectl, saltbush, saltbush-agent
ADMIN="saltbush admin --grpc-addr $GRPC --tls-dir $WORK/data/pki"
# façade http://$HTTP (the profile's EKS endpoint), cluster demo at $(cat "$WORK/kube/host"),
# agent status: saltbush-agent status --status-addr $AGENT_STATUS; logs in $WORK/*.log
EOF
	trap 'exit 0' INT TERM
	sleep infinity &
	PIDS+=($!)
	wait $!
fi
