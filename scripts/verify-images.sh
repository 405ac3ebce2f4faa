#!/usr/bin/env bash
# verify-images.sh AGENT_BINARY: checks what images/ puts on a K3s server VM
# for the guest agent (`make images-verify` builds the agent and runs this).
#
#   1. systemd unit: `systemd-analyze verify` in a scratch root that holds the
#      agent binary at /usr/local/bin/saltbush-agent and the host's own units
#      (the targets the unit's default dependencies name). Any warning about
#      the unit (unknown directive or section, unparsable value, missing
#      ExecStart binary) fails. A self-test first proves that a misspelt
#      directive and a missing binary do fail, so a systemd whose verify
#      stopped failing on warnings is caught rather than trusted.
#      Then `systemd-analyze security --offline` must rate the unit's exposure
#      at most 2.0 (a removed hardening line shows up there), and the lines
#      the agent's interface depends on must be present.
#   2. preset: `systemctl --root preset` in the scratch root, whose only other
#      preset is `disable *`, must enable the unit without a parse warning.
#   3. OpenRC script: `sh -n`, then sourced with OpenRC's helpers stubbed:
#      depend() must need net and order after k3s, the supervisor settings
#      must be there, and start_pre must refuse a missing agent.yaml.
#   4. YAML: the K3s snippet and agent.yaml.example parse strictly (duplicate
#      keys fail); the example's keys are exactly the agent's flag names and
#      the snippet disables what saltbush manages and keeps the kubeconfig
#      0600 (quoted: an unquoted 0600 is the integer 384 to K3s).
#      A tiny Go program using sigs.k8s.io/yaml (already in go.mod).
set -euo pipefail

usage() {
	echo "usage: $0 AGENT_BINARY" >&2
	exit 2
}
[[ $# -eq 1 ]] || usage
agent=$1
[[ -f $agent && -x $agent ]] || {
	echo "verify-images: $agent is not an executable file" >&2
	exit 2
}
agent=$(cd "$(dirname "$agent")" && pwd)/$(basename "$agent")

src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
GO=${GO:-go}

fail() {
	echo "verify-images: FAILED: $*" >&2
	exit 1
}
ok() { echo "verify-images: ok: $*"; }

for tool in systemd-analyze systemctl; do
	command -v "$tool" >/dev/null || fail "$tool not found (Debian: apt-get install systemd)"
done

unit=images/systemd/saltbush-agent.service
preset=images/systemd/50-saltbush-agent.preset
openrc=images/openrc/saltbush-agent
k3s=images/k3s/config.yaml.d/50-saltbush.yaml
webhooks=images/k3s/config.yaml.d/60-saltbush-webhooks.yaml
k3sdropin=images/systemd/k3s.service.d/50-saltbush-webhooks.conf
example=images/agent.yaml.example
for f in "$unit" "$preset" "$openrc" "$k3s" "$webhooks" "$k3sdropin" "$example"; do
	[[ -f $f ]] || fail "$f is missing"
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The host's unit directory: the targets and slices every service depends on.
hostunits=
for d in /usr/lib/systemd/system /lib/systemd/system; do
	if [[ -f $d/sysinit.target ]]; then
		hostunits=$d
		break
	fi
done
[[ -n $hostunits ]] || fail "no systemd unit directory with sysinit.target on this machine"

# mkroot DIR: a root with the host's units, the agent binary, our unit and our
# preset, and a catch-all `disable *` preset so only ours can enable anything.
mkroot() {
	local r=$1
	mkdir -p "$r/usr/lib/systemd/system" "$r/usr/lib/systemd/system-preset" "$r/etc/systemd/system"
	cp -a "$hostunits/." "$r/usr/lib/systemd/system/"
	install -D -m 0755 "$agent" "$r/usr/local/bin/saltbush-agent"
	install -m 0644 "$unit" "$r/usr/lib/systemd/system/saltbush-agent.service"
	install -m 0644 "$preset" "$r/usr/lib/systemd/system-preset/50-saltbush-agent.preset"
	echo 'disable *' >"$r/usr/lib/systemd/system-preset/99-default.preset"
}

# verify ROOT: systemd-analyze verify on the unit; fails on a non-zero exit
# and on any line of output about the unit (--recursive-errors=no makes
# warnings in the unit itself, not only errors, a non-zero exit).
verify() {
	local r=$1 out rc=0
	out=$(systemd-analyze verify --recursive-errors=no --man=no --root="$r" saltbush-agent.service 2>&1) || rc=$?
	[[ -n $out ]] && printf '%s\n' "$out" >&2
	[[ $rc -eq 0 ]] || return 1
	! grep -q 'saltbush-agent' <<<"$out"
}

# 1. The systemd unit.
root=$scratch/root
mkroot "$root"

broken=$scratch/broken
mkroot "$broken"
sed -i 's/^ProtectSystem=/ProtectSystm=/' "$broken/usr/lib/systemd/system/saltbush-agent.service"
grep -q '^ProtectSystm=' "$broken/usr/lib/systemd/system/saltbush-agent.service" || fail "self-test: could not misspell ProtectSystem= in a copy"
if verify "$broken" 2>/dev/null; then fail "self-test: systemd-analyze verify accepted a misspelt directive (ProtectSystm=)"; fi
sed -i 's/^ProtectSystm=/ProtectSystem=/' "$broken/usr/lib/systemd/system/saltbush-agent.service"
rm "$broken/usr/local/bin/saltbush-agent"
if verify "$broken" 2>/dev/null; then fail "self-test: systemd-analyze verify accepted a missing ExecStart binary"; fi
ok "self-test: verify rejects a misspelt directive and a missing ExecStart binary"

verify "$root" || fail "systemd-analyze verify $unit"
ok "systemd-analyze verify $unit"

for line in \
	'Type=simple' \
	'ExecStart=/usr/local/bin/saltbush-agent run --config /etc/saltbush/agent.yaml' \
	'ConditionPathExists=/etc/saltbush/agent.yaml' \
	'After=k3s.service network-online.target' \
	'Wants=network-online.target' \
	'Restart=always' \
	'StartLimitIntervalSec=0' \
	'StateDirectory=saltbush-agent' \
	'ReadWritePaths=/var/lib/saltbush-agent' \
	'ProtectSystem=strict' \
	'CapabilityBoundingSet=' \
	'WantedBy=multi-user.target'; do
	grep -qxF "$line" "$unit" || fail "$unit lacks the line: $line"
done
ok "$unit has the lines the agent's interface depends on"

# --threshold is the exposure times 10; the unit rates 1.7 today.
out=$(systemd-analyze security --offline=yes --root="$root" --threshold=20 saltbush-agent.service 2>&1) || {
	printf '%s\n' "$out" | grep -v '✓' >&2
	fail "systemd-analyze security: exposure above 2.0 (a hardening line was removed or weakened?)"
}
ok "systemd-analyze security: $(grep -o 'Overall exposure level.*' <<<"$out")"

# 2. The preset.
out=$(systemctl --root="$root" preset saltbush-agent.service 2>&1) || {
	printf '%s\n' "$out" >&2
	fail "systemctl preset saltbush-agent.service"
}
if grep -q '50-saltbush-agent.preset' <<<"$out"; then
	printf '%s\n' "$out" >&2
	fail "$preset: systemctl warned about it"
fi
state=$(systemctl --root="$root" is-enabled saltbush-agent.service 2>&1) || true
[[ $state == enabled ]] || fail "$preset: after preset the unit is '$state', not enabled"
[[ -L $root/etc/systemd/system/multi-user.target.wants/saltbush-agent.service ]] ||
	fail "$preset: preset did not link the unit into multi-user.target.wants"
ok "$preset enables saltbush-agent.service (multi-user.target.wants)"

# 3. The OpenRC script.
[[ $(head -n 1 "$openrc") == '#!/sbin/openrc-run' ]] || fail "$openrc: first line is not #!/sbin/openrc-run"
[[ -x $openrc ]] || fail "$openrc is not executable"
sh -n "$openrc" || fail "sh -n $openrc"
# openrc_eval CONFIG: source the script with OpenRC's helpers stubbed, run
# depend() and start_pre() (agent_config=CONFIG unless empty), print settings.
openrc_eval() {
	sh -c '
		need() { echo "need $*"; }
		after() { echo "after $*"; }
		use() { :; }; before() { :; }; provide() { :; }; keyword() { :; }
		eerror() { echo "eerror: $*"; }
		ewarn() { :; }; einfo() { :; }; ebegin() { :; }; eend() { :; }
		checkpath() { :; }
		RC_SVCNAME=saltbush-agent
		[ -n "$2" ] && agent_config=$2
		. "$1"
		depend
		echo "supervisor=$supervisor"
		echo "command=$command"
		echo "command_args=$command_args"
		echo "command_background=$command_background"
		echo "respawn_delay=$respawn_delay"
		echo "respawn_max=$respawn_max"
		echo "output_log=$output_log"
		echo "error_log=$error_log"
		if start_pre; then echo "start_pre=ok"; else echo "start_pre=refused"; fi
	' openrc_eval "./$openrc" "$1"
}
out=$(openrc_eval "") || fail "$openrc: sourcing it failed"
for want in 'need net' 'after k3s' 'supervisor=supervise-daemon' 'command=/usr/local/bin/saltbush-agent' \
	'command_args=run --config /etc/saltbush/agent.yaml' 'command_background=true' 'respawn_delay=5' 'respawn_max=0' \
	'output_log=/var/log/saltbush-agent.log' 'error_log=/var/log/saltbush-agent.log'; do
	grep -qxF "$want" <<<"$out" || {
		printf '%s\n' "$out" >&2
		fail "$openrc: expected '$want'"
	}
done
out=$(openrc_eval "$scratch/no-such-agent.yaml")
grep -qxF 'start_pre=refused' <<<"$out" && grep -q "^eerror: $scratch/no-such-agent.yaml does not exist" <<<"$out" || {
	printf '%s\n' "$out" >&2
	fail "$openrc: start_pre does not refuse a missing agent.yaml with a message"
}
touch "$scratch/agent.yaml"
grep -qxF 'start_pre=ok' <<<"$(openrc_eval "$scratch/agent.yaml")" || fail "$openrc: start_pre refuses an existing agent.yaml"
ok "$openrc: syntax, depend(), supervise-daemon settings, start_pre refuses a missing agent.yaml"

# 4. The YAML files.
mkdir -p "$scratch/yamlcheck"
cat >"$scratch/yamlcheck/main.go" <<'EOF'
// Checks images/agent.yaml.example and the K3s snippet (see verify-images.sh).
package main

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// agentConfig has exactly the keys of `saltbush-agent run`'s flags.
type agentConfig struct {
	AccountID     *string  `json:"account-id"`
	ClusterName   *string  `json:"cluster-name"`
	ClusterUID    *string  `json:"cluster-uid"`
	InstanceID    *string  `json:"instance-id"`
	Endpoint      []string `json:"endpoint"`
	Cert          *string  `json:"cert"`
	Key           *string  `json:"key"`
	CA            *string  `json:"ca"`
	Kubeconfig    *string  `json:"kubeconfig"`
	StateDir      *string  `json:"state-dir"`
	WebhookAddr   *string  `json:"webhook-addr"`
	WebhookDir    *string  `json:"webhook-dir"`
	StatusAddr    *string  `json:"status-addr"`
	ReviewTTL     *string  `json:"review-cache-ttl"`
	ReviewNegTTL  *string  `json:"review-negative-cache-ttl"`
	ReviewTimeout *string  `json:"review-timeout"`
	DriftInterval *string  `json:"drift-interval"`
	PodWebhook    *string  `json:"pod-identity-webhook-addr"`
	PodEndpoint   *string  `json:"pod-credentials-endpoint"`
	Region        *string  `json:"region"`
	KeysInterval  *string  `json:"service-account-keys-interval"`
	LogLevel      *string  `json:"log-level"`
	LogJSON       *bool    `json:"log-json"`
}

func main() {
	var errs []string
	bad := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }

	example, k3s, webhooks := os.Args[1], os.Args[2], os.Args[3]
	if b, err := os.ReadFile(example); err != nil {
		bad("%v", err)
	} else {
		var c agentConfig
		if err := yaml.UnmarshalStrict(b, &c); err != nil {
			bad("%s: %v", example, err)
		} else {
			want := map[string]*string{"kubeconfig": c.Kubeconfig, "state-dir": c.StateDir,
				"webhook-addr": c.WebhookAddr, "status-addr": c.StatusAddr, "drift-interval": c.DriftInterval,
				"log-level": c.LogLevel, "account-id": c.AccountID, "cluster-name": c.ClusterName,
				"cluster-uid": c.ClusterUID, "instance-id": c.InstanceID, "cert": c.Cert, "key": c.Key, "ca": c.CA}
			for k, v := range want {
				if v == nil || *v == "" {
					bad("%s: %s is missing or empty", example, k)
				}
			}
			if c.LogJSON == nil {
				bad("%s: log-json is missing", example)
			}
			if len(c.Endpoint) == 0 {
				bad("%s: endpoint is empty", example)
			}
			for _, e := range c.Endpoint {
				if _, _, err := net.SplitHostPort(e); err != nil {
					bad("%s: endpoint %q: %v", example, e, err)
				}
			}
			defaults := map[string]struct {
				got  *string
				want string
			}{
				"kubeconfig":     {c.Kubeconfig, "/etc/rancher/k3s/k3s.yaml"},
				"state-dir":      {c.StateDir, "/var/lib/saltbush-agent"},
				"webhook-addr":   {c.WebhookAddr, "127.0.0.1:9444"},
				"status-addr":    {c.StatusAddr, "127.0.0.1:9445"},
				"drift-interval": {c.DriftInterval, "10m"},
				"pod-identity-webhook-addr":     {c.PodWebhook, "127.0.0.1:9446"},
				"service-account-keys-interval": {c.KeysInterval, "1m"},
				"review-cache-ttl":          {c.ReviewTTL, "5s"},
				"review-negative-cache-ttl": {c.ReviewNegTTL, "2s"},
				"review-timeout":            {c.ReviewTimeout, "5s"},
				"log-level":      {c.LogLevel, "info"},
				"ca":             {c.CA, "/etc/saltbush/pki/ca.crt"},
			}
			for k, d := range defaults {
				if d.got != nil && *d.got != d.want {
					bad("%s: %s is %q, the agent's interface says %q", example, k, *d.got, d.want)
				}
			}
			if c.DriftInterval != nil {
				if _, err := time.ParseDuration(*c.DriftInterval); err != nil {
					bad("%s: drift-interval: %v", example, err)
				}
			}
			// The file names `saltbush admin cert issue --agent UID/INSTANCE` writes.
			if c.InstanceID != nil && c.Cert != nil && c.Key != nil {
				for k, v := range map[string]string{"cert": *c.Cert, "key": *c.Key} {
					ext := map[string]string{"cert": ".crt", "key": ".key"}[k]
					if w := "/etc/saltbush/pki/agent-" + *c.InstanceID + ext; v != w {
						bad("%s: %s is %q, cert issue writes %q", example, k, v, w)
					}
				}
			}
		}
	}

	if b, err := os.ReadFile(k3s); err != nil {
		bad("%v", err)
	} else {
		var m map[string]any
		if err := yaml.UnmarshalStrict(b, &m); err != nil {
			bad("%s: %v", k3s, err)
		} else {
			var disabled []string
			for _, k := range []string{"disable", "disable+"} {
				if l, ok := m[k].([]any); ok {
					for _, v := range l {
						disabled = append(disabled, fmt.Sprint(v))
					}
				} else if m[k] != nil {
					bad("%s: %s is not a list", k3s, k)
				}
			}
			for _, c := range []string{"coredns", "metrics-server", "local-storage"} {
				if !slices.Contains(disabled, c) {
					bad("%s: %s is not disabled", k3s, c)
				}
			}
			if mode, ok := m["write-kubeconfig-mode"].(string); !ok || mode != "0600" {
				bad(`%s: write-kubeconfig-mode must be the string "0600", is %#v`, k3s, m["write-kubeconfig-mode"])
			}
		}
	}

	// The webhook snippet names the files `saltbush-agent webhook-config`
	// writes under the default state directory, and adds the webhook
	// authorizer after Node and RBAC.
	if b, err := os.ReadFile(webhooks); err != nil {
		bad("%v", err)
	} else {
		var m map[string][]string
		if err := yaml.UnmarshalStrict(b, &m); err != nil {
			bad("%s: %v", webhooks, err)
		}
		args := m["kube-apiserver-arg+"]
		for _, want := range []string{
			"authentication-token-webhook-config-file=/var/lib/saltbush-agent/webhook/authentication.kubeconfig",
			"authorization-webhook-config-file=/var/lib/saltbush-agent/webhook/authorization.kubeconfig",
			"authentication-token-webhook-version=v1", "authorization-webhook-version=v1",
			"authorization-mode=Node,RBAC,Webhook",
		} {
			if !slices.Contains(args, want) {
				bad("%s: kube-apiserver-arg+ lacks %s", webhooks, want)
			}
		}
	}

	if len(errs) > 0 {
		slices.Sort(errs)
		fmt.Fprintln(os.Stderr, strings.Join(errs, "\n"))
		os.Exit(1)
	}
}
EOF
# Run from the repository root so the main module's go.mod resolves the import.
"$GO" run "$scratch/yamlcheck/main.go" "$example" "$k3s" "$webhooks" || fail "YAML check of $example, $k3s and $webhooks"
ok "$example, $k3s and $webhooks parse strictly and say what the agent and saltbush need"

# 5. K3s's drop-in runs webhook-config with the agent's configuration before
# the apiserver starts.
grep -qxF 'ExecStartPre=/usr/local/bin/saltbush-agent webhook-config --config /etc/saltbush/agent.yaml' "$k3sdropin" ||
	fail "$k3sdropin: no ExecStartPre running saltbush-agent webhook-config"
grep -qxF '[Service]' "$k3sdropin" || fail "$k3sdropin: no [Service] section"
"$1" webhook-config --help >/dev/null || fail "the agent has no webhook-config command"
ok "$k3sdropin writes the webhook kubeconfigs before K3s starts"

echo "verify-images: all checks passed"
