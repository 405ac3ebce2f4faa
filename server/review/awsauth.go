package review

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
	yamlv2 "sigs.k8s.io/yaml/goyaml.v2"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
	"github.com/saltbush/saltbush/server/access"
)

// awsAuth is a cluster's kube-system/aws-auth ConfigMap, parsed as
// aws-iam-authenticator's EKS ConfigMap mapper parses it (its
// pkg/mapper/configmap and pkg/config):
//
//   - mapRoles and mapUsers are YAML lists converted to JSON and decoded
//     into {rolearn, username, groups} and {userarn, username, groups}; the
//     decoding is encoding/json's, so keys match case-insensitively
//     ("RoleArn", "UserName") and unknown keys are ignored.
//   - An entry without its ARN (or, for roles, with both rolearn and sso)
//     is skipped; the other entries still map. A list that is not valid
//     YAML maps nobody; the other lists still do.
//   - Entries are keyed by their lowercased ARN, so a later duplicate
//     replaces an earlier one.
//   - mapAccounts is a YAML list of account ids, decoded by yaml.v2 as
//     aws-iam-authenticator does (an unquoted id stays its digits).
//
// Nothing here fails a review: errors are logged and a bad map maps nobody.
type awsAuth struct {
	roles    map[string]authMapping
	users    map[string]authMapping
	accounts map[string]bool
}

// authMapping is one entry's username and groups, either of which may hold
// templates ({{SessionName}}, ...).
type authMapping struct {
	username string
	groups   []string
}

// roleMapping and userMapping are aws-iam-authenticator's config.RoleMapping
// and config.UserMapping as they appear in the ConfigMap.
type roleMapping struct {
	RoleARN string `json:"rolearn"`
	// SSO is a permission-set matcher: matching by it is behind a feature
	// gate aws-iam-authenticator leaves off, so such an entry maps nobody
	// here either. It is decoded only to refuse an entry giving both.
	SSO      json.RawMessage `json:"sso"`
	Username string          `json:"username"`
	Groups   []string        `json:"groups"`
}

type userMapping struct {
	UserARN  string   `json:"userarn"`
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}

// blank reports a value aws-iam-authenticator treats as an empty list.
func blank(data string) bool {
	t := strings.TrimSpace(data)
	return t == "" || t == "``" || t == `""`
}

// entries splits a YAML list into its items' JSON, so that one malformed
// item is skipped instead of spoiling the others.
func entries(data string) ([]json.RawMessage, error) {
	if blank(data) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := yaml.Unmarshal([]byte(data), &items); err != nil {
		return nil, err
	}
	return items, nil
}

// parseAWSAuth parses cm; the errors say which entries were skipped.
func parseAWSAuth(cm *deliveryv1.AwsAuthConfigMap) (*awsAuth, []error) {
	a := &awsAuth{roles: map[string]authMapping{}, users: map[string]authMapping{}, accounts: map[string]bool{}}
	var errs []error
	roles, err := entries(cm.GetMapRoles())
	if err != nil {
		errs = append(errs, fmt.Errorf("mapRoles: %w", err))
	}
	for i, raw := range roles {
		var m roleMapping
		switch err := json.Unmarshal(raw, &m); {
		case err != nil:
			errs = append(errs, fmt.Errorf("mapRoles[%d]: %w", i, err))
		case m.RoleARN == "":
			errs = append(errs, fmt.Errorf("mapRoles[%d]: no rolearn", i))
		case len(m.SSO) > 0 && string(m.SSO) != "null":
			errs = append(errs, fmt.Errorf("mapRoles[%d]: only one of rolearn and sso may be given", i))
		case m.Username == "":
			// aws-iam-authenticator would answer an empty username;
			// the apiserver would then admit a user with no name.
			errs = append(errs, fmt.Errorf("mapRoles[%d]: no username", i))
		default:
			a.roles[strings.ToLower(m.RoleARN)] = authMapping{username: m.Username, groups: m.Groups}
		}
	}
	users, err := entries(cm.GetMapUsers())
	if err != nil {
		errs = append(errs, fmt.Errorf("mapUsers: %w", err))
	}
	for i, raw := range users {
		var m userMapping
		switch err := json.Unmarshal(raw, &m); {
		case err != nil:
			errs = append(errs, fmt.Errorf("mapUsers[%d]: %w", i, err))
		case m.UserARN == "":
			errs = append(errs, fmt.Errorf("mapUsers[%d]: no userarn", i))
		case m.Username == "":
			errs = append(errs, fmt.Errorf("mapUsers[%d]: no username", i))
		default:
			a.users[strings.ToLower(m.UserARN)] = authMapping{username: m.Username, groups: m.Groups}
		}
	}
	if data := cm.GetMapAccounts(); !blank(data) {
		var accounts []string
		if err := yamlv2.Unmarshal([]byte(data), &accounts); err != nil {
			errs = append(errs, fmt.Errorf("mapAccounts: %w", err))
		} else {
			for _, id := range accounts {
				a.accounts[id] = true
			}
		}
	}
	return a, errs
}

// authenticatorARN is aws-iam-authenticator's canonical ARN of a signer
// (its arn.Canonicalize of STS's answer): an assumed-role session becomes
// its role, without a path because a session ARN names none; a user, role
// or root is its ARN as STS reports it, path included.
func authenticatorARN(s access.Signer) string {
	if s.SessionName != "" {
		return s.Principal.Canonical()
	}
	return s.ARN
}

// lookup maps a signer as aws-iam-authenticator's ConfigMap mapper does:
// mapRoles, then mapUsers, both by the canonical ARN compared without
// regard to case; then, for a principal of an account in mapAccounts, its
// canonical ARN as the username (not a template) and no groups.
func (a *awsAuth) lookup(s access.Signer) (authMapping, bool) {
	arn := authenticatorARN(s)
	key := strings.ToLower(arn)
	if m, ok := a.roles[key]; ok {
		return m, true
	}
	if m, ok := a.users[key]; ok {
		return m, true
	}
	if a.accounts[s.Principal.Account] {
		return authMapping{username: arn, groups: []string{}}, true
	}
	return authMapping{}, false
}

// awsAuthMemoSize bounds the parsed ConfigMaps kept: one or two versions
// per cluster whose agents are asking.
const awsAuthMemoSize = 512

// awsAuthMemo keeps parsed aws-auth ConfigMaps by cluster incarnation,
// ConfigMap uid and resourceVersion, so a review does not parse YAML. The
// key is the agent's say-so, so the text is kept too and compared: an
// agent sending another version under the same name gets its text parsed,
// never another version's mappings, and one cluster's agent can never
// reach another cluster's entry.
type awsAuthMemo struct {
	mu      sync.Mutex
	entries map[awsAuthKey]memoAuth
}

type awsAuthKey struct{ clusterUID, uid, resourceVersion string }

type memoAuth struct {
	roles, users, accounts string
	parsed                 *awsAuth
}

func (m *memoAuth) same(cm *deliveryv1.AwsAuthConfigMap) bool {
	return m.roles == cm.GetMapRoles() && m.users == cm.GetMapUsers() && m.accounts == cm.GetMapAccounts()
}

// errParse marks a ConfigMap that parsed with errors (entries skipped).
var errParse = errors.New("aws-auth ConfigMap entries skipped")

// get returns cm parsed, and the parse errors when it was parsed now
// (nil when it came from the memo: its errors were reported then).
func (m *awsAuthMemo) get(clusterUID string, cm *deliveryv1.AwsAuthConfigMap) (*awsAuth, error) {
	key := awsAuthKey{clusterUID: clusterUID, uid: cm.GetUid(), resourceVersion: cm.GetResourceVersion()}
	named := key.uid != "" && key.resourceVersion != ""
	if named {
		m.mu.Lock()
		e, ok := m.entries[key]
		m.mu.Unlock()
		if ok && e.same(cm) {
			return e.parsed, nil
		}
	}
	parsed, errs := parseAWSAuth(cm)
	if named {
		m.mu.Lock()
		if m.entries == nil {
			m.entries = map[awsAuthKey]memoAuth{}
		}
		if _, ok := m.entries[key]; !ok && len(m.entries) >= awsAuthMemoSize {
			// Evict one (map order is unspecified, which is enough for
			// a bound: the live versions are asked for again and again).
			for k := range m.entries {
				delete(m.entries, k)
				break
			}
		}
		m.entries[key] = memoAuth{roles: cm.GetMapRoles(), users: cm.GetMapUsers(), accounts: cm.GetMapAccounts(), parsed: parsed}
		m.mu.Unlock()
	}
	if len(errs) > 0 {
		return parsed, fmt.Errorf("%w: %w", errParse, errors.Join(errs...))
	}
	return parsed, nil
}
