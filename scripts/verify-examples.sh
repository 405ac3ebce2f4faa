#!/usr/bin/env bash
# verify-examples.sh SALTBUSH_BINARY: checks docs/examples, what
# docs/operations.md ("Scale-out", "Metrics and alerts") tells operators to
# install (tests/ops runs the units' flags and checks the rules' metrics
# against running processes; this checks the files as systemd and
# Prometheus read them).
#
#   1. systemd units: `systemd-analyze verify` of saltbush.service and
#      etcd.service in a scratch root holding the host's units, the saltbush
#      binary at /usr/local/bin/saltbush and a stand-in etcd binary (verify
#      checks that ExecStart names an executable, not which). Any warning
#      about a unit fails. A self-test first proves that a misspelt directive
#      and a missing ExecStart binary do fail. Then `systemd-analyze security
#      --offline` must rate each unit's exposure at most 2.0.
#   2. the Prometheus rules: `promtool check rules` (Debian: apt-get install
#      prometheus), after a self-test that a broken expression fails.
set -euo pipefail

usage() {
	echo "usage: $0 SALTBUSH_BINARY" >&2
	exit 2
}
[[ $# -eq 1 ]] || usage
saltbush=$1
[[ -f $saltbush && -x $saltbush ]] || {
	echo "verify-examples: $saltbush is not an executable file" >&2
	exit 2
}
saltbush=$(cd "$(dirname "$saltbush")" && pwd)/$(basename "$saltbush")

src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"

fail() {
	echo "verify-examples: FAILED: $*" >&2
	exit 1
}
ok() { echo "verify-examples: ok: $*"; }

for tool in systemd-analyze promtool; do
	command -v "$tool" >/dev/null || fail "$tool not found (Debian: apt-get install systemd prometheus)"
done

units=(docs/examples/saltbush.service docs/examples/etcd.service)
rules=docs/examples/prometheus-alerts.yaml
for f in "${units[@]}" "$rules"; do
	[[ -f $f ]] || fail "$f is missing"
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

hostunits=
for d in /usr/lib/systemd/system /lib/systemd/system; do
	if [[ -f $d/sysinit.target ]]; then
		hostunits=$d
		break
	fi
done
[[ -n $hostunits ]] || fail "no systemd unit directory with sysinit.target on this machine"

# mkroot DIR: the host's units, both binaries, both example units.
mkroot() {
	local r=$1
	mkdir -p "$r/usr/lib/systemd/system" "$r/etc/systemd/system"
	cp -a "$hostunits/." "$r/usr/lib/systemd/system/"
	install -D -m 0755 "$saltbush" "$r/usr/local/bin/saltbush"
	printf '#!/bin/sh\nexit 0\n' >"$scratch/etcd-stand-in"
	install -D -m 0755 "$scratch/etcd-stand-in" "$r/usr/local/bin/etcd"
	for u in "${units[@]}"; do
		install -m 0644 "$u" "$r/etc/systemd/system/$(basename "$u")"
	done
}

# verify ROOT UNIT: fails on a non-zero exit and on any output naming the unit.
verify() {
	local r=$1 u=$2 out rc=0
	out=$(systemd-analyze verify --recursive-errors=no --man=no --root="$r" "$u" 2>&1) || rc=$?
	[[ -n $out ]] && printf '%s\n' "$out" >&2
	[[ $rc -eq 0 ]] || return 1
	! grep -q "${u%.service}" <<<"$out"
}

root=$scratch/root
mkroot "$root"

broken=$scratch/broken
mkroot "$broken"
sed -i 's/^ProtectSystem=/ProtectSystm=/' "$broken/etc/systemd/system/saltbush.service"
grep -q '^ProtectSystm=' "$broken/etc/systemd/system/saltbush.service" || fail "self-test: could not misspell ProtectSystem= in a copy"
if verify "$broken" saltbush.service 2>/dev/null; then fail "self-test: systemd-analyze verify accepted a misspelt directive"; fi
sed -i 's/^ProtectSystm=/ProtectSystem=/' "$broken/etc/systemd/system/saltbush.service"
rm "$broken/usr/local/bin/etcd"
if verify "$broken" etcd.service 2>/dev/null; then fail "self-test: systemd-analyze verify accepted a missing ExecStart binary"; fi
ok "self-test: verify rejects a misspelt directive and a missing ExecStart binary"

for u in "${units[@]}"; do
	name=$(basename "$u")
	verify "$root" "$name" || fail "systemd-analyze verify $u"
	ok "systemd-analyze verify $u"
	out=$(systemd-analyze security --offline=yes --root="$root" --threshold=20 "$name" 2>&1) || {
		printf '%s\n' "$out" | grep -v '✓' >&2
		fail "systemd-analyze security $u: exposure above 2.0 (a hardening line was removed or weakened?)"
	}
	ok "systemd-analyze security $u: $(grep -o 'Overall exposure level.*' <<<"$out")"
done

# The lines the documentation names.
grep -qF -- '--master-key-file %d/master.key' docs/examples/saltbush.service || fail "saltbush.service: no --master-key-file from its credentials"
grep -qF -- '--replica-name %H' docs/examples/saltbush.service || fail "saltbush.service: no --replica-name %H"
grep -qF -- '--client-cert-auth' docs/examples/etcd.service || fail "etcd.service: clients are not required to present certificates"
grep -qF -- '--peer-client-cert-auth' docs/examples/etcd.service || fail "etcd.service: peers are not required to present certificates"
grep -qF -- '--initial-cluster-token saltbush-etcd' docs/examples/etcd.service || fail "etcd.service: the token docs/operations.md's restore names is not the unit's"
ok "the units carry the flags docs/operations.md names"

# 2. The alert rules.
sed 's/expr: up{job="saltbush"} == 0/expr: up{job="saltbush"} ==/' "$rules" >"$scratch/broken-rules.yaml"
cmp -s "$rules" "$scratch/broken-rules.yaml" && fail "self-test: could not break an expression in a copy of $rules"
if promtool check rules "$scratch/broken-rules.yaml" >/dev/null 2>&1; then fail "self-test: promtool accepted a broken expression"; fi
out=$(promtool check rules "$rules" 2>&1) || {
	printf '%s\n' "$out" >&2
	fail "promtool check rules $rules"
}
ok "promtool check rules $rules: $(grep -o 'SUCCESS.*' <<<"$out")"

echo "verify-examples: all checks passed"
