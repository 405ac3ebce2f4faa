package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"text/template"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// RenderParams is what a bundle is rendered from: the add-on's desired spec
// on one cluster.
type RenderParams struct {
	// ClusterName is the EKS cluster name; some controllers need it
	// (aws-load-balancer-controller's --cluster-name).
	ClusterName string
	// Namespace is namespaceConfig.namespace; "" means the add-on's
	// DefaultNamespace.
	Namespace string
	// ServiceAccountRoleARN is annotated on the add-on's credentialed service
	// accounts unless PodIdentityRoles names another role for one of them.
	ServiceAccountRoleARN string
	// PodIdentityRoles maps a service account (one of Version.PodIdentity)
	// to the role ARN of its pod identity association.
	PodIdentityRoles map[string]string
	// Values are configurationValues as ParseConfiguration returned them.
	// Render does not validate them again.
	Values map[string]any

	// The cluster's facts, from its record. A bundle that cannot work
	// without one asks for it with `required`, and Render then fails with a
	// *MissingFactError while it is empty; one given is validated.

	// ServiceIPv4CIDR is the cluster's service CIDR (kubernetesNetworkConfig
	// serviceIpv4Cidr, 10.43.0.0/16 unless CreateCluster said otherwise); ""
	// for a cluster without one (ipFamily ipv6). The cluster DNS address
	// (ClusterDNSIP) is derived from it.
	ServiceIPv4CIDR string
	// Endpoint is the cluster's API server URL (https://host:port), as
	// DescribeCluster returns it; "" until the provisioner reports it, which
	// it does at the latest when the cluster turns ACTIVE.
	Endpoint string
	// CertificateAuthorityData is the cluster CA as DescribeCluster returns
	// it: base64 of the PEM certificate(s); "" until reported, like Endpoint.
	CertificateAuthorityData string
	// Region is the AWS region the cluster lives in ("us-east-1").
	Region string
}

// systemNamespaces are never created by a bundle: on K3s an emptied manifest
// prunes what it created, and pruning one of these would take the cluster
// down with the add-on.
var systemNamespaces = []string{"default", "kube-node-lease", "kube-public", "kube-system"}

// clusterScopedKinds are the kinds a bundle may create without a namespace.
// Every other kind must carry exactly the namespace the bundle renders into,
// so that namespaceConfig really moves the add-on and nothing lands in K3s's
// default namespace by omission.
var clusterScopedKinds = []string{
	"APIService", "CSIDriver", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
	"IngressClass", "MutatingWebhookConfiguration", "Namespace", "PriorityClass", "RuntimeClass",
	"StorageClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
	"ValidatingWebhookConfiguration",
}

// renderData is the template's dot. Field names are the template API that
// catalog/addons/README.md documents.
type renderData struct {
	AddonName                string
	AddonVersion             string
	ClusterName              string
	Namespace                string
	CreateNamespace          bool // false for kube-system and the other system namespaces
	ServiceAccountRoleARN    string
	PodIdentityRoles         map[string]string
	Values                   map[string]any
	ServiceIPv4CIDR          string
	ClusterDNSIP             string // "" without a service IPv4 CIDR
	Endpoint                 string
	CertificateAuthorityData string
	Region                   string
}

// RoleARN is the IAM role for a service account: its pod identity
// association if there is one, else serviceAccountRoleArn, else "".
func (d *renderData) RoleARN(serviceAccount string) string {
	if arn := d.PodIdentityRoles[serviceAccount]; arn != "" {
		return arn
	}
	return d.ServiceAccountRoleARN
}

// Render produces the bundle as multi-document YAML whose documents are
// JSON objects (JSON is YAML: every YAML reader, the agent's included,
// reads them). Each object is decoded and re-encoded, so the output is
// canonical (sorted keys, no comments, no empty documents) and the same
// params always give the same bytes, which K3s's checksum relies on. The
// documents are encoded as JSON rather than YAML's block style because
// the delivery watch renders every new generation of every add-on on
// every replica, and the YAML emitter was most of that work: a third of a
// replica's allocations under load. Objects are checked for apiVersion, kind,
// metadata.name, namespace placement and duplicates. A bundle that needs a
// cluster fact p lacks fails with an error wrapping *MissingFactError.
func (v *Version) Render(p RenderParams) ([]byte, error) {
	out, err := v.render(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v, err)
	}
	return out, nil
}

func (v *Version) render(p RenderParams) ([]byte, error) {
	ns := p.Namespace
	if ns == "" {
		ns = v.Addon.DefaultNamespace
	}
	if !dnsLabelRE.MatchString(ns) {
		return nil, fmt.Errorf("namespace %q is not a valid namespace name", ns)
	}
	if p.ClusterName == "" {
		return nil, errors.New("cluster name is required")
	}
	for _, sa := range slices.Sorted(maps.Keys(p.PodIdentityRoles)) {
		if !slices.ContainsFunc(v.PodIdentity, func(pi PodIdentity) bool { return pi.ServiceAccount == sa }) {
			return nil, fmt.Errorf("pod identity association for service account %q: the add-on has no such service account", sa)
		}
	}
	dnsIP, err := checkFacts(p)
	if err != nil {
		return nil, err
	}
	values, err := canonicalValues(p.Values)
	if err != nil {
		return nil, err
	}
	data := &renderData{
		AddonName:                v.Addon.Name,
		AddonVersion:             v.Version,
		ClusterName:              p.ClusterName,
		Namespace:                ns,
		CreateNamespace:          !slices.Contains(systemNamespaces, ns),
		ServiceAccountRoleARN:    p.ServiceAccountRoleARN,
		PodIdentityRoles:         maps.Clone(p.PodIdentityRoles),
		Values:                   values,
		ServiceIPv4CIDR:          p.ServiceIPv4CIDR,
		ClusterDNSIP:             dnsIP,
		Endpoint:                 p.Endpoint,
		CertificateAuthorityData: p.CertificateAuthorityData,
		Region:                   p.Region,
	}

	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	seen := map[string]bool{}
	for _, name := range v.files {
		var buf bytes.Buffer
		if err := v.bundle.ExecuteTemplate(&buf, name, data); err != nil {
			// text/template buries a function's error in its position
			// report; a missing fact is said plainly, and stays
			// recognisable for callers that wait for it.
			var missing *MissingFactError
			if errors.As(err, &missing) {
				return nil, fmt.Errorf("%s: %w", name, missing)
			}
			return nil, err
		}
		for i, doc := range splitDocuments(buf.Bytes()) {
			obj, err := decodeObject(doc)
			if err != nil {
				return nil, fmt.Errorf("%s document %d: %v", name, i, err)
			}
			if obj == nil {
				continue // a document the template left empty
			}
			id, err := checkObject(obj, ns)
			if err != nil {
				return nil, fmt.Errorf("%s document %d: %v", name, i, err)
			}
			if err := checkImages(obj); err != nil {
				return nil, fmt.Errorf("%s document %d: %v", name, i, err)
			}
			if seen[id] {
				return nil, fmt.Errorf("%s document %d: %s is rendered twice", name, i, id)
			}
			seen[id] = true
			if out.Len() > 0 {
				out.WriteString("---\n")
			}
			// One line of JSON and its newline; <, > and & as they are.
			if err := enc.Encode(obj); err != nil {
				return nil, fmt.Errorf("%s document %d: %v", name, i, err)
			}
		}
	}
	if out.Len() == 0 {
		return nil, errors.New("the bundle rendered no objects")
	}
	return out.Bytes(), nil
}

// canonicalValues round-trips values through JSON so that templates see the
// same types whether the caller passed ParseConfiguration's result or values
// decoded some other way (float64 from encoding/json): the rendered bytes
// depend on the values, not on how they were decoded.
func canonicalValues(v map[string]any) (map[string]any, error) {
	if len(v) == 0 {
		return map[string]any{}, nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("configuration values: %v", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return nil, fmt.Errorf("configuration values: %v", err)
	}
	return normalizeNumbers(doc).(map[string]any), nil
}

// decodeObject parses one YAML document; nil means the document is empty.
func decodeObject(doc []byte) (map[string]any, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %v", err)
	}
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber() // keep numbers exactly as the template wrote them
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not a Kubernetes object but %s", jsonKind(v))
	}
	return obj, nil
}

// checkObject enforces what K3s's apply needs and the bundle contract
// promises, returning an identity for duplicate detection.
func checkObject(obj map[string]any, ns string) (string, error) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if apiVersion == "" || kind == "" || name == "" {
		return "", errors.New("every object needs apiVersion, kind and metadata.name")
	}
	objNS, hasNS := meta["namespace"]
	if slices.Contains(clusterScopedKinds, kind) {
		if hasNS {
			return "", fmt.Errorf("%s %s is cluster-scoped but has a namespace", kind, name)
		}
		if kind == "Namespace" && slices.Contains(systemNamespaces, name) {
			return "", fmt.Errorf("namespace %s belongs to the cluster, a bundle must not create it", name)
		}
	} else if objNS != ns {
		return "", fmt.Errorf("%s %s must be in namespace %s, not %v", kind, name, ns, objNS)
	}
	group, _, _ := strings.Cut(apiVersion, "/")
	if !strings.Contains(apiVersion, "/") {
		group = "" // the core group: "v1"
	}
	return fmt.Sprintf("%s %s/%s (group %q)", kind, ns, name, group), nil
}

// splitDocuments splits a YAML stream on "---" lines the way kubectl and
// K3s's deploy controller do. Documents holding only comments and blank lines
// are dropped.
func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if hasContent(cur.Bytes()) {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for line := range bytes.Lines(b) {
		trimmed := bytes.TrimRight(line, " \t\r\n")
		if bytes.Equal(trimmed, []byte("---")) || bytes.HasPrefix(trimmed, []byte("--- ")) {
			flush()
			cur.Write(bytes.TrimPrefix(trimmed, []byte("---")))
			cur.WriteByte('\n')
			continue
		}
		cur.Write(line)
	}
	flush()
	return docs
}

func hasContent(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' {
			return true
		}
	}
	return false
}

// templateFuncs is the whole function set bundles may use besides
// text/template's built-ins. It is deliberately small: bundles are data that
// ships in the image, and every function is a contract.
func templateFuncs() template.FuncMap {
	return template.FuncMap{
		"toYaml":   toYAML,
		"indent":   indent,
		"nindent":  func(n int, s string) string { return "\n" + indent(n, s) },
		"default":  defaultValue,
		"quote":    quote,
		"get":      get,
		"required": required,
	}
}

// toYAML encodes v as YAML without the trailing newline, for use with
// nindent.
func toYAML(v any) (string, error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// indent prefixes every line of s with n spaces.
func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

// defaultValue returns given unless it is missing (nil). Unlike Sprig's
// default, a present false, 0 or "" is kept: a value the user set explicitly
// wins, and the schema is where emptiness is forbidden.
func defaultValue(def, given any) any {
	if given == nil {
		return def
	}
	return given
}

// quote renders a scalar as a double-quoted YAML string (JSON string syntax
// is valid YAML), so that user strings can never break out of their field.
// A missing value is an error rather than the string "<no value>".
func quote(v any) (string, error) {
	var s string
	switch t := v.(type) {
	case nil:
		return "", errors.New("quote: missing value")
	case string:
		s = t
	case bool, int, int64, float64, json.Number:
		s = fmt.Sprint(t)
	default:
		return "", fmt.Errorf("quote: %s is not a scalar", reflect.TypeOf(v))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// get walks nested objects: get .Values "image" "tag" is the tag, or nil when
// any step is missing, where .Values.image.tag would fail on a missing image.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
