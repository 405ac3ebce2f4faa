#!/usr/bin/env bash
# Proves that the contract checks fire. In a scratch copy of the work tree it
# makes changes that must be caught and one that must not:
#   1. a proto change without regenerating    -> make check-generated fails
#      (and a validation table edited by hand -> make check-generated fails)
#   2. a JSON rename in eks/v1                 -> make breaking fails (WIRE_JSON)
#   3. a field renumber in storage/v1          -> make breaking fails (WIRE)
#   4. a removed RPC in control/v1             -> make breaking fails (FILE)
#   5. an additive optional field in eks/v1    -> make breaking passes
set -euo pipefail

src=$(git rev-parse --show-toplevel)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

fresh() {
	rm -rf "$scratch/tree"
	mkdir -p "$scratch/tree"
	(cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$scratch/tree")
	(cd "$scratch/tree" && git init -q && git add -A && git -c user.name=selftest -c user.email=selftest@invalid commit -qm scratch)
}

expect() { # expect pass|fail description target
	local want=$1 what=$2 target=$3
	if (cd "$scratch/tree" && make -s "$target" >"$scratch/out" 2>&1); then got=pass; else got=fail; fi
	if [[ $got != "$want" ]]; then
		echo "contract-selftest: FAILED: $what: make $target should $want but did $got" >&2
		cat "$scratch/out" >&2
		exit 1
	fi
	echo "contract-selftest: ok: $what: make $target did $got, as it should"
}

fresh
expect pass "unchanged tree" breaking

fresh
sed -i 's/^message Cluster {$/message Cluster {\n  string selftest_added = 99;/' "$scratch/tree/api/proto/saltbush/eks/v1/cluster.proto"
expect fail "proto changed, api/ not regenerated" check-generated

fresh
sed -i 's/"ListClustersRequestMaxResults": *{kind: kindInteger, min: ptr(1), max: ptr(100)}/"ListClustersRequestMaxResults": {kind: kindInteger, min: ptr(1), max: ptr(1000)}/' \
	"$scratch/tree/server/validation/model_gen.go"
grep -q "max: ptr(1000)" "$scratch/tree/server/validation/model_gen.go"
# Committed: regenerating restores the file, so only a committed table differs.
(cd "$scratch/tree" && git -c user.name=selftest -c user.email=selftest@invalid commit -qam 'stale table')
expect fail "validation table differs from the EKS model" check-generated

fresh
sed -i 's/  string role_arn = 3;/  string role_arn_renamed = 3;/' "$scratch/tree/api/proto/saltbush/eks/v1/cluster.proto"
grep -q role_arn_renamed "$scratch/tree/api/proto/saltbush/eks/v1/cluster.proto"
expect fail "eks/v1 JSON name changed" breaking

fresh
sed -i 's/  string kubernetes_version = 5;/  string kubernetes_version = 55;/' "$scratch/tree/api/proto/saltbush/storage/v1/cluster.proto"
grep -q "kubernetes_version = 55" "$scratch/tree/api/proto/saltbush/storage/v1/cluster.proto"
expect fail "storage/v1 field renumbered" breaking

fresh
sed -i '/rpc FinalizeDeletion(FinalizeDeletionRequest)/d' "$scratch/tree/api/proto/saltbush/control/v1/cluster_control.proto"
expect fail "control/v1 RPC removed" breaking

fresh
sed -i 's/^message Cluster {$/message Cluster {\n  optional string selftest_added = 99;/' "$scratch/tree/api/proto/saltbush/eks/v1/cluster.proto"
expect pass "eks/v1 additive optional field" breaking
