package access

import (
	"strings"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
)

// entryTypes maps AWS's type names to the stored enum.
var entryTypes = map[string]storagev1.AccessEntryType{
	"STANDARD":       storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_STANDARD,
	"EC2_LINUX":      storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2_LINUX,
	"EC2_WINDOWS":    storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2_WINDOWS,
	"FARGATE_LINUX":  storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_FARGATE_LINUX,
	"HYBRID_LINUX":   storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_HYBRID_LINUX,
	"HYPERPOD_LINUX": storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_HYPERPOD_LINUX,
	"EC2":            storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2,
}

// TypeName is AWS's name of an entry type.
func TypeName(t storagev1.AccessEntryType) string {
	return strings.TrimPrefix(t.String(), "ACCESS_ENTRY_TYPE_")
}

// parseType reads a CreateAccessEntry type; absent is STANDARD.
func parseType(cluster, name string) (storagev1.AccessEntryType, error) {
	if name == "" {
		return storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_STANDARD, nil
	}
	t, ok := entryTypes[name]
	if !ok {
		return 0, invalid(cluster, "The type %q is invalid. Valid types are STANDARD, EC2_LINUX, EC2_WINDOWS, FARGATE_LINUX, HYBRID_LINUX, HYPERPOD_LINUX and EC2.", clip(name))
	}
	return t, nil
}

// forbiddenPrefixes may not begin a username or a group: Kubernetes and
// AWS reserve them, and a user who could pick `system:masters` would be
// cluster-admin whatever the access policies say.
var forbiddenPrefixes = []string{"system:", "eks:", "aws:", "amazon:", "iam:"}

// templates are the placeholders a username may hold; token review fills
// them in (aws-iam-authenticator's names).
var templates = []string{"{{SessionName}}", "{{SessionNameRaw}}", "{{AccountID}}", "{{AccessKeyID}}", "{{EC2PrivateDNSName}}"}

const (
	maxUsernameLen = 128
	maxGroupLen    = 128
	maxGroups      = 100
)

// validateUsername checks a STANDARD entry's chosen username.
func validateUsername(cluster, u string) error {
	if len(u) > maxUsernameLen {
		return invalid(cluster, "The username is invalid: it must be at most %d characters.", maxUsernameLen)
	}
	for _, p := range forbiddenPrefixes {
		if strings.HasPrefix(u, p) {
			return invalid(cluster, "The username %s is invalid, it cannot start with %s", clip(u), p)
		}
	}
	for _, r := range u {
		if r < 0x20 || r == 0x7f {
			return invalid(cluster, "The username is invalid: it contains control characters.")
		}
	}
	// Every {{...}} must be a known template.
	rest := u
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i:], "}}")
		if j < 0 {
			return invalid(cluster, "The username %s is invalid: unterminated template.", clip(u))
		}
		t := rest[i : i+j+2]
		known := false
		for _, k := range templates {
			known = known || t == k
		}
		if !known || t == "{{EC2PrivateDNSName}}" {
			return invalid(cluster, "The username %s is invalid: unsupported template %s.", clip(u), clip(t))
		}
		rest = rest[i+j+2:]
	}
	// AWS: a session name is chosen by whoever assumes the role, so it
	// must not be able to make up the whole username.
	if i := strings.Index(u, "{{SessionName"); i >= 0 && !strings.Contains(u[:i], ":") {
		return invalid(cluster, "The username %s is invalid: {{SessionName}} must have a colon before it.", clip(u))
	}
	return nil
}

// validateGroups checks a STANDARD entry's groups and returns them
// without duplicates, in the order given.
func validateGroups(cluster string, groups []string) ([]string, error) {
	if len(groups) > maxGroups {
		return nil, invalid(cluster, "At most %d kubernetesGroups may be given.", maxGroups)
	}
	out := make([]string, 0, len(groups))
	seen := make(map[string]bool, len(groups))
	for _, g := range groups {
		if g == "" || len(g) > maxGroupLen {
			return nil, invalid(cluster, "The kubernetes group name %q is invalid: it must be 1 to %d characters.", clip(g), maxGroupLen)
		}
		for _, p := range forbiddenPrefixes {
			if strings.HasPrefix(g, p) {
				return nil, invalid(cluster, "The kubernetes group name %s is invalid, it cannot start with %s", clip(g), p)
			}
		}
		for _, r := range g {
			if r < 0x20 || r == 0x7f {
				return nil, invalid(cluster, "The kubernetes group name is invalid: it contains control characters.")
			}
		}
		if !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	return out, nil
}

// generatedUsername is the username AWS gives an entry when none is set.
func generatedUsername(t storagev1.AccessEntryType, p Principal) string {
	switch t {
	case storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2_LINUX, storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2_WINDOWS,
		storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2:
		return "system:node:{{EC2PrivateDNSName}}"
	case storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_FARGATE_LINUX, storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_HYBRID_LINUX,
		storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_HYPERPOD_LINUX:
		return "system:node:{{SessionName}}"
	}
	if p.Kind == "role" {
		// The path is not part of a session ARN.
		return "arn:aws:sts::" + p.Account + ":assumed-role/" + p.Name + "/{{SessionName}}"
	}
	return p.ARN
}

// generatedGroups are the groups AWS gives node entries.
func generatedGroups(t storagev1.AccessEntryType) []string {
	switch t {
	case storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2_LINUX, storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_EC2_WINDOWS,
		storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_HYBRID_LINUX, storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_HYPERPOD_LINUX:
		return []string{"system:nodes"}
	case storagev1.AccessEntryType_ACCESS_ENTRY_TYPE_FARGATE_LINUX:
		return []string{"system:node-proxier", "system:nodes"}
	}
	return nil
}

// clip shortens caller-supplied text quoted in an error.
func clip(s string) string {
	if len(s) > 256 {
		return s[:256] + "..."
	}
	return s
}

// typeMessage is AWS's refusal of a STANDARD-only operation.
const typeMessage = `This operation can only be performed on Access Entries with a type of "STANDARD".`

func standardOnly(cluster string) error {
	return invalidRequest(cluster, "%s", typeMessage)
}
