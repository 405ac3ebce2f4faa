package hostile

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Categories of the corpus.
const (
	catJSON      = "bad JSON"
	catType      = "wrong type"
	catSize      = "huge body or header"
	catARN       = "invalid name or ARN"
	catEnum      = "bad enum"
	catRange     = "out-of-range integer"
	catToken     = "tampered or foreign paging token"
	catPath      = "path traversal"
	catUnicode   = "unicode look-alike"
	catControl   = "control character"
	catDupQuery  = "duplicate query key"
	catTags      = "oversize or reserved tags"
	catIdem      = "bad clientRequestToken"
	catMedia     = "bad Content-Type"
	catMethod    = "wrong method or unknown path"
	catSignature = "tampered signature"
	catSmuggle   = "smuggled path member"
)

// cases is the corpus, built over the resources newEnv made.
func (e *env) cases() []hostileCase {
	var all []hostileCase
	for _, group := range [][]hostileCase{
		e.jsonCases(), e.typeCases(), e.sizeCases(), e.arnCases(), e.enumCases(), e.rangeCases(), e.tokenCases(),
		e.pathCases(), e.unicodeCases(), e.controlCases(), e.dupQueryCases(), e.tagCases(), e.idempotencyCases(),
		e.mediaCases(), e.methodCases(), e.smuggleCases(), e.signatureCases(), e.queryCases(), e.oidcProviderCases(),
		e.webIdentityCases(), e.eksAuthCases(),
	} {
		all = append(all, group...)
	}
	return all
}

// Paths of the resources newEnv made.
func (e *env) clusterPath() string { return "/clusters/" + e.cluster }
func (e *env) entryPath() string {
	return e.clusterPath() + "/access-entries/" + escape(e.entryPrincipal)
}
func (e *env) podPath() string   { return e.clusterPath() + "/pod-identity-associations/" + e.podID }
func tagsPath(arn string) string { return "/tags/" + escape(arn) }

const viewPolicy = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"

// namePattern is the part of a cluster name's refusal that says why.
const namePattern = "Member must satisfy regular expression pattern: ^[0-9A-Za-z][A-Za-z0-9\\-_]*"

// jsonCases are bodies that are not one JSON object: AWS answers
// SerializationException, and the façade must too, whatever a lenient
// decoder would make of them (docs/architecture.md, "Errors"). A body that
// is JSON but breaks a member's rules (an unknown member, a duplicate) is
// the operation's validation exception instead, naming the member.
func (e *env) jsonCases() []hostileCase {
	c := e.clusterPath()
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	deepObj := strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)
	return []hostileCase{
		{name: "CreateCluster truncated body", category: catJSON, op: "CreateCluster", method: "POST", path: "/clusters",
			body: `{"name": "trunc", "roleArn": `, status: s400, exception: ser, message: notJ},
		{name: "CreateAddon trailing garbage", category: catJSON, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: `{"addonName": "vpc-cni"} garbage`, status: s400, exception: ser, message: notJ},
		{name: "TagResource a second object after the first", category: catJSON, op: "TagResource", method: "POST", path: tagsPath(e.clusterARN),
			body: `{"tags": {"a": "b"}} {"tags": {"c": "d"}}`, status: s400, exception: ser, message: notJ},
		{name: "UpdateAddon unbalanced closing brace", category: catJSON, op: "UpdateAddon", method: "POST", path: c + "/addons/coredns/update",
			body: `{"addonVersion": "v1.11.4-eksbuild.1"}}`, status: s400, exception: ser, message: notJ},
		{name: "StartInsightsRefresh trailing garbage", category: catJSON, op: "StartInsightsRefresh", method: "POST", path: c + "/insights-refresh",
			body: `{} garbage`, status: s400, exception: ser, message: notJ},
		{name: "CreateCluster list nesting depth bomb", category: catJSON, op: "CreateCluster", method: "POST", path: "/clusters",
			body: `{"resourcesVpcConfig": {"subnetIds": ` + deep + `}}`, status: s400, exception: ser, message: notJ},
		{name: "CreateAccessEntry object nesting bomb in an unknown member", category: catJSON, op: "CreateAccessEntry", method: "POST",
			path: c + "/access-entries", body: `{"principalArn": "arn:aws:iam::000000000000:role/deep", "x": ` + deepObj + `}`,
			status: s400, exception: ipe, member: "x"},
		{name: "UpdateClusterConfig object nesting bomb in a map value", category: catJSON, op: "UpdateClusterConfig", method: "POST",
			path: c + "/update-config", body: `{"logging": ` + deepObj + `}`, status: s400, exception: ipe, member: `"a"`},
		{name: "ListInsights NaN maxResults", category: catJSON, op: "ListInsights", method: "POST", path: c + "/insights",
			body: `{"maxResults": NaN}`, status: s400, exception: ser, message: notJ},
		{name: "ListInsights Infinity maxResults", category: catJSON, op: "ListInsights", method: "POST", path: c + "/insights",
			body: `{"maxResults": Infinity}`, status: s400, exception: ser, message: notJ},
		{name: "CreateAddon duplicate addonName keys", category: catJSON, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: `{"addonName": "coredns", "addonName": "vpc-cni"}`, status: s400, exception: ipe, member: "addonName"},
		{name: "TagResource duplicate tag keys", category: catJSON, op: "TagResource", method: "POST", path: tagsPath(e.clusterARN),
			body: `{"tags": {"team": "a", "team": "b"}}`, status: s400, exception: bre, member: `"team"`},
		{name: "CreatePodIdentityAssociation single-quoted JSON", category: catJSON, op: "CreatePodIdentityAssociation", method: "POST",
			path: c + "/pod-identity-associations", body: `{'namespace': 'default', 'serviceAccount': 'x', 'roleArn': '` + podRole + `'}`,
			status: s400, exception: ser, message: notJ},
		{name: "UpdatePodIdentityAssociation JSON with a comment", category: catJSON, op: "UpdatePodIdentityAssociation", method: "POST",
			path: e.podPath(), body: `{/* */ "roleArn": "` + podRole + `"}`, status: s400, exception: ser, message: notJ},
		{name: "UpdateClusterVersion body a JSON string", category: catJSON, op: "UpdateClusterVersion", method: "POST", path: c + "/updates",
			body: `"1.36"`, status: s400, exception: ser, message: "The request body is not a JSON object."},
		{name: "AssociateAccessPolicy body JSON null", category: catJSON, op: "AssociateAccessPolicy", method: "POST",
			path: e.entryPath() + "/access-policies", body: `null`, status: s400, exception: ser, message: "The request body is not a JSON object."},
		{name: "UpdateAccessEntry byte-order mark before the body", category: catJSON, op: "UpdateAccessEntry", method: "POST", path: e.entryPath(),
			body: "\uFEFF{\"username\": \"dev\"}", status: s400, exception: ser, message: notJ},
		{name: "CreateCluster invalid UTF-8 in a string", category: catJSON, op: "CreateCluster", method: "POST", path: "/clusters",
			body: "{\"name\": \"bad\xff\xfename\"}", status: s400, exception: ser, message: notJ},
		{name: "UpdateClusterVersion raw tab inside a string", category: catJSON, op: "UpdateClusterVersion", method: "POST", path: c + "/updates",
			body: "{\"version\": \"1.\t36\"}", status: s400, exception: ser, message: notJ},
		{name: "CreateAccessEntry body only whitespace then garbage", category: catJSON, op: "CreateAccessEntry", method: "POST",
			path: c + "/access-entries", body: "   \n\t x", status: s400, exception: ser, message: notJ},
	}
}

// typeCases send a member of the wrong JSON type, in the body or the
// query: the operation's validation exception, naming the member and the
// type the model gives it (docs/contracts.md, "Input validation").
func (e *env) typeCases() []hostileCase {
	c := e.clusterPath()
	return []hostileCase{
		{name: "CreateCluster name a number", category: catType, op: "CreateCluster", method: "POST", path: "/clusters",
			body: `{"name": 5, "roleArn": "` + clusterRole + `", "resourcesVpcConfig": {}}`, status: s400, exception: ipe,
			member: "name", message: "Member must be a string"},
		{name: "CreateCluster resourcesVpcConfig a list", category: catType, op: "CreateCluster", method: "POST", path: "/clusters",
			body: `{"name": "typed", "roleArn": "` + clusterRole + `", "resourcesVpcConfig": []}`, status: s400, exception: ipe,
			member: "resourcesVpcConfig", message: "Value '[]' at 'resourcesVpcConfig' failed to satisfy constraint: Member must be a structure"},
		{name: "CreateCluster subnetIds a string", category: catType, op: "CreateCluster", method: "POST", path: "/clusters",
			body: `{"name": "typed", "roleArn": "` + clusterRole + `", "resourcesVpcConfig": {"subnetIds": "subnet-a"}}`, status: s400,
			exception: ipe, member: "resourcesVpcConfig.subnetIds", message: "Member must be a list"},
		{name: "CreateAddon tags a list", category: catType, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: `{"addonName": "vpc-cni", "tags": ["a"]}`, status: s400, exception: ipe, member: "tags",
			message: "Value '[a]' at 'tags' failed to satisfy constraint: Member must be a map"},
		{name: "CreateAddon podIdentityAssociations an object", category: catType, op: "CreateAddon", method: "POST", path: c + "/addons",
			body:   `{"addonName": "vpc-cni", "podIdentityAssociations": {"serviceAccount": "aws-node", "roleArn": "` + podRole + `"}}`,
			status: s400, exception: ipe, member: "podIdentityAssociations", message: "Member must be a list"},
		{name: "UpdateAddon configurationValues an object", category: catType, op: "UpdateAddon", method: "POST", path: c + "/addons/coredns/update",
			body: `{"configurationValues": {"replicaCount": 2}}`, status: s400, exception: ipe, member: "configurationValues",
			message: "Value '{replicaCount=2}' at 'configurationValues' failed to satisfy constraint: Member must be a string"},
		{name: "CreateAccessEntry kubernetesGroups an object", category: catType, op: "CreateAccessEntry", method: "POST", path: c + "/access-entries",
			body: `{"principalArn": "arn:aws:iam::000000000000:role/typed", "kubernetesGroups": {"a": "b"}}`, status: s400, exception: ipe,
			member: "kubernetesGroups", message: "Member must be a list"},
		{name: "UpdateAccessEntry username a list", category: catType, op: "UpdateAccessEntry", method: "POST", path: e.entryPath(),
			body: `{"username": ["dev"]}`, status: s400, exception: ipe, member: "username", message: "Member must be a string"},
		{name: "AssociateAccessPolicy accessScope a string", category: catType, op: "AssociateAccessPolicy", method: "POST",
			path: e.entryPath() + "/access-policies", body: `{"policyArn": "` + viewPolicy + `", "accessScope": "cluster"}`, status: s400,
			exception: ipe, member: "accessScope", message: "Member must be a structure"},
		{name: "AssociateAccessPolicy accessScope.namespaces a string", category: catType, op: "AssociateAccessPolicy", method: "POST",
			path: e.entryPath() + "/access-policies", body: `{"policyArn": "` + viewPolicy + `", "accessScope": {"type": "namespace", "namespaces": "dev"}}`,
			status: s400, exception: ipe, member: "accessScope.namespaces", message: "Member must be a list"},
		{name: "ListInsights maxResults a string", category: catType, op: "ListInsights", method: "POST", path: c + "/insights",
			body: `{"maxResults": "ten"}`, status: s400, exception: ipe, member: "maxResults", message: "Member must be an integer"},
		{name: "ListInsights maxResults a fraction", category: catType, op: "ListInsights", method: "POST", path: c + "/insights",
			body: `{"maxResults": 1.5}`, status: s400, exception: ipe, member: "maxResults", message: "Member must be an integer"},
		{name: "ListInsights filter.categories a string", category: catType, op: "ListInsights", method: "POST", path: c + "/insights",
			body: `{"filter": {"categories": "UPGRADE_READINESS"}}`, status: s400, exception: ipe, member: "filter.categories",
			message: "Member must be a list"},
		{name: "CreatePodIdentityAssociation disableSessionTags a string", category: catType, op: "CreatePodIdentityAssociation", method: "POST",
			path:   c + "/pod-identity-associations",
			body:   `{"namespace": "default", "serviceAccount": "typed", "roleArn": "` + podRole + `", "disableSessionTags": "yes"}`,
			status: s400, exception: ipe, member: "disableSessionTags", message: "Member must be a boolean"},
		{name: "UpdatePodIdentityAssociation roleArn an object", category: catType, op: "UpdatePodIdentityAssociation", method: "POST",
			path: e.podPath(), body: `{"roleArn": {}}`, status: s400, exception: ipe, member: "roleArn", message: "Member must be a string"},
		{name: "UpdateClusterConfig deletionProtection a number", category: catType, op: "UpdateClusterConfig", method: "POST",
			path: c + "/update-config", body: `{"deletionProtection": 1}`, status: s400, exception: ipe, member: "deletionProtection",
			message: "Member must be a boolean"},
		{name: "UpdateClusterConfig clusterLogging an object", category: catType, op: "UpdateClusterConfig", method: "POST",
			path: c + "/update-config", body: `{"logging": {"clusterLogging": {"types": ["api"]}}}`, status: s400, exception: ipe,
			member: "logging.clusterLogging", message: "Member must be a list"},
		{name: "UpdateClusterVersion version a number", category: catType, op: "UpdateClusterVersion", method: "POST", path: c + "/updates",
			body: `{"version": 1.36}`, status: s400, exception: ipe, member: "version", message: "Member must be a string"},
		{name: "UpdateClusterVersion force a string", category: catType, op: "UpdateClusterVersion", method: "POST", path: c + "/updates",
			body: `{"version": "1.36", "force": "true"}`, status: s400, exception: ipe, member: "force", message: "Member must be a boolean"},
		{name: "TagResource tag value a number", category: catType, op: "TagResource", method: "POST", path: tagsPath(e.addonARN),
			body: `{"tags": {"team": 7}}`, status: s400, exception: bre, member: "tags", message: "Member must be a map of strings"},
		{name: "DescribeClusterVersions defaultOnly not a boolean", category: catType, op: "DescribeClusterVersions", method: "GET",
			path: "/cluster-versions?defaultOnly=yes", status: s400, exception: ipe, member: "defaultOnly", message: "Member must be a boolean"},
		{name: "DescribeClusterVersions includeAll a number", category: catType, op: "DescribeClusterVersions", method: "GET",
			path: "/cluster-versions?includeAll=2", status: s400, exception: ipe, member: "includeAll", message: "Member must be a boolean"},
		{name: "DescribeAddonVersions maxResults a fraction", category: catType, op: "DescribeAddonVersions", method: "GET",
			path: "/addons/supported-versions?maxResults=1.5", status: s400, exception: ipe, member: "maxResults", message: "Member must be an integer"},
		{name: "DeleteAddon preserve not a boolean", category: catType, op: "DeleteAddon", method: "DELETE", path: c + "/addons/coredns?preserve=yes",
			status: s400, exception: ipe, member: "preserve", message: "Member must be a boolean"},
		{name: "ListPodIdentityAssociations maxResults hexadecimal", category: catType, op: "ListPodIdentityAssociations", method: "GET",
			path: c + "/pod-identity-associations?maxResults=0x10", status: s400, exception: ipe, member: "maxResults", message: "Member must be an integer"},
		{name: "ListUpdates maxResults with exponent", category: catType, op: "ListUpdates", method: "GET", path: c + "/updates?maxResults=1e2",
			status: s400, exception: ipe, member: "maxResults", message: "Member must be an integer"},
	}
}

// sizeCases are over the façade's limits: bodies over MaxBodyBytes (1 MiB,
// server/server.go) get RequestEntityTooLargeException 413 whether
// declared or streamed, before authentication; the SigV4 verifier bounds
// its own inputs (gateway/sigv4) and answers InvalidSignatureException.
func (e *env) sizeCases() []hostileCase {
	c := e.clusterPath()
	over := make([]byte, 1<<20+1)
	for i := range over {
		over[i] = ' '
	}
	copy(over, `{"tags": {"a": "b"}}`)
	big := []byte(`{"configurationValues": "` + strings.Repeat("x", 3<<19) + `"}`)
	atLimit := []byte(`{"x": "` + strings.Repeat("y", 1<<20-len(`{"x": ""}`)) + `"}`)
	return []hostileCase{
		{name: "TagResource body one byte over the limit", category: catSize, op: "TagResource", method: "POST", path: tagsPath(e.clusterARN),
			bodyBytes: over, status: s413, exception: tle, message: "Request body exceeds the limit of 1048576 bytes."},
		{name: "UpdateAddon body of 1.5 MiB", category: catSize, op: "UpdateAddon", method: "POST", path: c + "/addons/coredns/update",
			bodyBytes: big, status: s413, exception: tle, message: "1048576 bytes"},
		{name: "CreateCluster chunked body over the limit", category: catSize, op: "CreateCluster", method: "POST", path: "/clusters",
			bodyBytes: big, chunked: true, status: s413, exception: tle, message: "1048576 bytes"},
		{name: "ListInsights body exactly at the limit is judged", category: catSize, op: "ListInsights", method: "POST", path: c + "/insights",
			bodyBytes: atLimit, status: s400, exception: ipe, member: "x"},
		{name: "DescribeCluster Authorization header over 4 KiB", category: catSize, op: "DescribeCluster", method: "GET", path: c,
			tamper: func(r *http.Request) {
				r.Header.Set("Authorization", r.Header.Get("Authorization")+", X="+strings.Repeat("a", 5<<10))
			}, status: s403, exception: ise, message: "too long"},
		{name: "ListClusters session token over 8 KiB", category: catSize, op: "ListClusters", method: "GET", path: "/clusters",
			header: map[string]string{"X-Amz-Security-Token": strings.Repeat("t", 9<<10)}, status: s403, exception: uce},
		{name: "ListAddons 65 signed headers", category: catSize, op: "ListAddons", method: "GET", path: c + "/addons",
			header: manyHeaders(65), status: s403, exception: ise},
		// Well beyond the HTTP server's header limit (64 KiB,
		// server/server.go) net/http answers 431 itself, before the façade
		// sees the request. Just beyond it, net/http is not exact: on a
		// reused connection it has already buffered up to 4 KiB of the
		// next request when the limit starts counting.
		{name: "DescribeCluster header of 128 KiB", category: catSize, op: "DescribeCluster", method: "GET", path: c,
			header: map[string]string{"X-Padding": strings.Repeat("p", 128<<10)}, status: http.StatusRequestHeaderFieldsTooLarge, plainHTTP: true},
		{name: "DescribeAddonConfiguration query string over 16 KiB", category: catSize, op: "DescribeAddonConfiguration", method: "GET",
			path: "/addons/configuration-schemas?addonName=coredns&addonVersion=" + strings.Repeat("v", 17<<10), status: s403, exception: ise,
			message: "too long"},
	}
}

// manyHeaders is n distinct X-Amz- headers, which the signer signs.
func manyHeaders(n int) map[string]string {
	out := map[string]string{}
	for i := range n {
		out[fmt.Sprintf("X-Amz-Meta-H%03d", i)] = "v"
	}
	return out
}

// arnCases name resources by ARNs and principals that are malformed,
// another account's, partition's, service's or region's: the tag
// operations answer BadRequestException for an ARN that does not parse and
// NotFoundException for one that names nothing the caller can see (the
// same for another account's, so nothing about it is revealed).
func (e *env) arnCases() []hostileCase {
	c := e.clusterPath()
	foreign := strings.Replace(e.clusterARN, ":"+e.account+":", ":111111111111:", 1)
	return []hostileCase{
		{name: "TagResource foreign-account cluster ARN", category: catARN, op: "TagResource", method: "POST", path: tagsPath(foreign),
			body: `{"tags": {"a": "b"}}`, status: s404, exception: nf},
		{name: "TagResource wrong-partition ARN", category: catARN, op: "TagResource", method: "POST",
			path: tagsPath(strings.Replace(e.clusterARN, "arn:aws:", "arn:aws-cn:", 1)), body: `{"tags": {"a": "b"}}`, status: s400, exception: bre, member: "resource ARN"},
		{name: "TagResource wrong-service ARN", category: catARN, op: "TagResource", method: "POST",
			path: tagsPath(strings.Replace(e.clusterARN, ":eks:", ":ec2:", 1)), body: `{"tags": {"a": "b"}}`, status: s400, exception: bre, member: "resource ARN"},
		{name: "TagResource truncated ARN", category: catARN, op: "TagResource", method: "POST",
			path: tagsPath(e.clusterARN[:len("arn:aws:eks:us-east-1:000000000000:clu")]), body: `{"tags": {"a": "b"}}`, status: s400, exception: bre, member: "resource ARN"},
		{name: "TagResource ARN of another region", category: catARN, op: "TagResource", method: "POST",
			path: tagsPath(strings.Replace(e.clusterARN, ":"+e.region+":", ":eu-west-1:", 1)), body: `{"tags": {"a": "b"}}`, status: s404, exception: nf},
		{name: "TagResource add-on ARN without its uuid", category: catARN, op: "TagResource", method: "POST",
			path: tagsPath(e.addonARN[:strings.LastIndexByte(e.addonARN, '/')]), body: `{"tags": {"a": "b"}}`, status: s404, exception: nf},
		{name: "TagResource nodegroup ARN", category: catARN, op: "TagResource", method: "POST",
			path: tagsPath("arn:aws:eks:" + e.region + ":" + e.account + ":nodegroup/" + e.cluster + "/ng/0000"), body: `{"tags": {"a": "b"}}`,
			status: s400, exception: bre, message: "Resource type nodegroup of"},
		{name: "UntagResource ARN with an account id of 11 digits", category: catARN, op: "UntagResource", method: "DELETE",
			path: tagsPath(strings.Replace(e.clusterARN, ":"+e.account+":", ":00000000000:", 1)) + "?tagKeys=a", status: s400, exception: bre, member: "resource ARN"},
		{name: "UntagResource not an ARN", category: catARN, op: "UntagResource", method: "DELETE", path: tagsPath("hostile-1") + "?tagKeys=a",
			status: s400, exception: bre, member: "resource ARN"},
		{name: "UntagResource pod identity association ARN of another cluster", category: catARN, op: "UntagResource", method: "DELETE",
			path: tagsPath(strings.Replace(e.podARN, "/"+e.cluster+"/", "/"+e.other+"/", 1)) + "?tagKeys=a", status: s404, exception: nf},
		{name: "ListTagsForResource access entry ARN with a forged uuid", category: catARN, op: "ListTagsForResource", method: "GET",
			path: tagsPath(e.entryARN[:strings.LastIndexByte(e.entryARN, '/')+1] + "00000000-0000-0000-0000-000000000000"), status: s404, exception: nf},
		{name: "ListTagsForResource ARN with an empty path segment", category: catARN, op: "ListTagsForResource", method: "GET",
			path: tagsPath("arn:aws:eks:" + e.region + ":" + e.account + ":addon/" + e.cluster + "//x"), status: s400, exception: bre, member: "resource ARN"},
		{name: "ListTagsForResource bare arn prefix", category: catARN, op: "ListTagsForResource", method: "GET", path: tagsPath("arn:"),
			status: s400, exception: bre, member: "resource ARN"},
		{name: "DescribeAccessEntry foreign-account principal", category: catARN, op: "DescribeAccessEntry", method: "GET",
			path: c + "/access-entries/" + escape("arn:aws:iam::111111111111:role/dev"), status: s404, exception: rnf},
		{name: "CreateAccessEntry principal of another service", category: catARN, op: "CreateAccessEntry", method: "POST", path: c + "/access-entries",
			body: `{"principalArn": "arn:aws:s3:::bucket"}`, status: s400, exception: ipe, member: "principalArn"},
		{name: "CreateAccessEntry principal ARN truncated", category: catARN, op: "CreateAccessEntry", method: "POST", path: c + "/access-entries",
			body: `{"principalArn": "arn:aws:iam::000000000000"}`, status: s400, exception: ipe, member: "principalArn"},
		{name: "AssociateAccessPolicy policy ARN of a foreign account", category: catARN, op: "AssociateAccessPolicy", method: "POST",
			path:   e.entryPath() + "/access-policies",
			body:   `{"policyArn": "arn:aws:eks::111111111111:cluster-access-policy/AmazonEKSViewPolicy", "accessScope": {"type": "cluster"}}`,
			status: s400, exception: ipe, member: "policyArn"},
		{name: "DisassociateAccessPolicy policy ARN of another partition", category: catARN, op: "DisassociateAccessPolicy", method: "DELETE",
			path:   e.entryPath() + "/access-policies/" + escape("arn:aws-cn:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"),
			status: s404, exception: rnf},
		{name: "ListAccessEntries associatedPolicyArn not a policy", category: catARN, op: "ListAccessEntries", method: "GET",
			path:   c + "/access-entries?associatedPolicyArn=" + url.QueryEscape("arn:aws:iam::aws:policy/AdministratorAccess"),
			status: s400, exception: ipe, member: "associatedPolicyArn"},
		{name: "CreatePodIdentityAssociation role of a foreign account", category: catARN, op: "CreatePodIdentityAssociation", method: "POST",
			path:   c + "/pod-identity-associations",
			body:   `{"namespace": "default", "serviceAccount": "foreign", "roleArn": "arn:aws:iam::111111111111:role/pods"}`,
			status: s400, exception: ipe, member: "roleArn"},
		{name: "UpdatePodIdentityAssociation targetRoleArn a user", category: catARN, op: "UpdatePodIdentityAssociation", method: "POST",
			path: e.podPath(), body: `{"targetRoleArn": "arn:aws:iam::111111111111:user/target"}`, status: s400, exception: ipe, member: "targetRoleArn"},
		{name: "CreateCluster roleArn of another service", category: catARN, op: "CreateCluster", method: "POST", path: "/clusters",
			body:   `{"name": "arned", "roleArn": "arn:aws:sts::000000000000:assumed-role/eks/x", "resourcesVpcConfig": {"subnetIds": ["subnet-a"]}}`,
			status: s400, exception: ipe, member: "roleArn"},
		{name: "CreateAddon serviceAccountRoleArn of another partition", category: catARN, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: `{"addonName": "vpc-cni", "serviceAccountRoleArn": "arn:aws-us-gov:iam::000000000000:role/cni"}`, status: s400, exception: ipe,
			member: "serviceAccountRoleArn"},
	}
}

// enumCases send values outside a model enum: the validation exception
// listing the enum's values.
func (e *env) enumCases() []hostileCase {
	c := e.clusterPath()
	return []hostileCase{
		{name: "CreateAddon resolveConflicts lower case", category: catEnum, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: `{"addonName": "vpc-cni", "resolveConflicts": "overwrite"}`, status: s400, exception: ipe, member: "resolveConflicts",
			message: "Member must satisfy enum value set: [OVERWRITE, NONE, PRESERVE]"},
		{name: "UpdateAddon resolveConflicts unknown", category: catEnum, op: "UpdateAddon", method: "POST", path: c + "/addons/coredns/update",
			body: `{"resolveConflicts": "MERGE"}`, status: s400, exception: ipe, member: "resolveConflicts"},
		{name: "CreateCluster authenticationMode unknown", category: catEnum, op: "CreateCluster", method: "POST", path: "/clusters",
			body:   `{"name": "enum", "roleArn": "` + clusterRole + `", "resourcesVpcConfig": {"subnetIds": ["subnet-a"]}, "accessConfig": {"authenticationMode": "API_ONLY"}}`,
			status: s400, exception: ipe, member: "accessConfig.authenticationMode"},
		{name: "UpdateClusterConfig supportType unknown", category: catEnum, op: "UpdateClusterConfig", method: "POST", path: c + "/update-config",
			body: `{"upgradePolicy": {"supportType": "LTS"}}`, status: s400, exception: ipe, member: "upgradePolicy.supportType"},
		{name: "UpdateClusterConfig log type unknown", category: catEnum, op: "UpdateClusterConfig", method: "POST", path: c + "/update-config",
			body: `{"logging": {"clusterLogging": [{"types": ["kubelet"], "enabled": true}]}}`, status: s400, exception: ipe,
			member: "logging.clusterLogging.1.member.types.1.member"},
		{name: "CreateAccessEntry type unknown", category: catEnum, op: "CreateAccessEntry", method: "POST", path: c + "/access-entries",
			body: `{"principalArn": "arn:aws:iam::000000000000:role/enum", "type": "ADMIN"}`, status: s400, exception: ipe, member: "type"},
		{name: "AssociateAccessPolicy accessScope.type unknown", category: catEnum, op: "AssociateAccessPolicy", method: "POST",
			path: e.entryPath() + "/access-policies", body: `{"policyArn": "` + viewPolicy + `", "accessScope": {"type": "global"}}`,
			status: s400, exception: ipe, member: "accessScope.type"},
		{name: "DescribeClusterVersions status unknown", category: catEnum, op: "DescribeClusterVersions", method: "GET",
			path: "/cluster-versions?status=deprecated", status: s400, exception: ipe, member: "status"},
		{name: "DescribeClusterVersions versionStatus in the wrong case", category: catEnum, op: "DescribeClusterVersions", method: "GET",
			path: "/cluster-versions?versionStatus=standard_support", status: s400, exception: ipe, member: "versionStatus"},
		{name: "ListInsights filter status unknown", category: catEnum, op: "ListInsights", method: "POST", path: c + "/insights",
			body: `{"filter": {"statuses": ["BROKEN"]}}`, status: s400, exception: ipe, member: "filter.statuses.1.member"},
		{name: "ListInsights filter category unknown", category: catEnum, op: "ListInsights", method: "POST", path: c + "/insights",
			body: `{"filter": {"categories": ["SECURITY"]}}`, status: s400, exception: ipe, member: "filter.categories.1.member"},
		{name: "CreateCluster ipFamily unknown", category: catEnum, op: "CreateCluster", method: "POST", path: "/clusters",
			body:   `{"name": "enum", "roleArn": "` + clusterRole + `", "resourcesVpcConfig": {"subnetIds": ["subnet-a"]}, "kubernetesNetworkConfig": {"ipFamily": "ipv5"}}`,
			status: s400, exception: ipe, member: "kubernetesNetworkConfig.ipFamily"},
	}
}

// rangeCases send integers outside the model's range, or outside 32 bits:
// the message names the bound the value is beyond, never the parser's
// overflow.
func (e *env) rangeCases() []hostileCase {
	c := e.clusterPath()
	return []hostileCase{
		{name: "ListClusters maxResults 0", category: catRange, op: "ListClusters", method: "GET", path: "/clusters?maxResults=0",
			status: s400, exception: ipe, member: "maxResults", message: "Member must have value greater than or equal to 1"},
		{name: "ListClusters maxResults 101", category: catRange, op: "ListClusters", method: "GET", path: "/clusters?maxResults=101",
			status: s400, exception: ipe, member: "maxResults", message: "Member must have value less than or equal to 100"},
		{name: "ListClusters maxResults -1", category: catRange, op: "ListClusters", method: "GET", path: "/clusters?maxResults=-1",
			status: s400, exception: ipe, member: "maxResults", message: "Member must have value greater than or equal to 1"},
		{name: "ListClusters maxResults 2^63", category: catRange, op: "ListClusters", method: "GET", path: "/clusters?maxResults=9223372036854775808",
			status: s400, exception: ipe, member: "maxResults", message: "Member must have value less than or equal to 100"},
		{name: "ListAddons maxResults 2^31", category: catRange, op: "ListAddons", method: "GET", path: c + "/addons?maxResults=2147483648",
			status: s400, exception: ipe, member: "maxResults", message: "Member must have value less than or equal to 100"},
		{name: "ListAddons maxResults -2^63-1", category: catRange, op: "ListAddons", method: "GET", path: c + "/addons?maxResults=-9223372036854775809",
			status: s400, exception: ipe, member: "maxResults", message: "Member must have value greater than or equal to 1"},
		{name: "ListAccessEntries maxResults 101", category: catRange, op: "ListAccessEntries", method: "GET", path: c + "/access-entries?maxResults=101",
			status: s400, exception: ipe, member: "maxResults"},
		{name: "ListAssociatedAccessPolicies maxResults 0", category: catRange, op: "ListAssociatedAccessPolicies", method: "GET",
			path: e.entryPath() + "/access-policies?maxResults=0", status: s400, exception: ire, member: "maxResults"},
		{name: "ListAccessPolicies maxResults 2^63", category: catRange, op: "ListAccessPolicies", method: "GET",
			path: "/access-policies?maxResults=9223372036854775808", status: s400, exception: ipe, member: "maxResults"},
		{name: "ListPodIdentityAssociations maxResults -1", category: catRange, op: "ListPodIdentityAssociations", method: "GET",
			path: c + "/pod-identity-associations?maxResults=-1", status: s400, exception: ipe, member: "maxResults"},
		{name: "ListUpdates maxResults 101", category: catRange, op: "ListUpdates", method: "GET", path: c + "/updates?maxResults=101",
			status: s400, exception: ipe, member: "maxResults"},
		{name: "DescribeAddonVersions maxResults 0", category: catRange, op: "DescribeAddonVersions", method: "GET",
			path: "/addons/supported-versions?maxResults=0", status: s400, exception: ipe, member: "maxResults"},
		{name: "DescribeClusterVersions maxResults 101", category: catRange, op: "DescribeClusterVersions", method: "GET",
			path: "/cluster-versions?maxResults=101", status: s400, exception: ipe, member: "maxResults"},
		{name: "ListInsights body maxResults 0", category: catRange, op: "ListInsights", method: "POST", path: c + "/insights",
			body: `{"maxResults": 0}`, status: s400, exception: ipe, member: "maxResults", message: "Member must have value greater than or equal to 1"},
		{name: "ListInsights body maxResults 2^63", category: catRange, op: "ListInsights", method: "POST", path: c + "/insights",
			body: `{"maxResults": 9223372036854775808}`, status: s400, exception: ipe, member: "maxResults",
			message: "Member must have value less than or equal to 100"},
		{name: "ListInsights body maxResults -1", category: catRange, op: "ListInsights", method: "POST", path: c + "/insights",
			body: `{"maxResults": -1}`, status: s400, exception: ipe, member: "maxResults", message: "Member must have value greater than or equal to 1"},
	}
}

// flip changes one bit of a token's first character, keeping it in the
// base64url alphabet.
func flip(token string) string {
	b := []byte(token)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}

// tokenCases replay continuation tokens where they do not belong: a token
// is bound to its listing (operation, cluster incarnation, prefix) and
// MAC'd (store/list.go), so a foreign, altered or forged one is "not
// valid" with the operation's exception.
func (e *env) tokenCases() []hostileCase {
	c := e.clusterPath()
	q := url.QueryEscape
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"v":1,"s":"x","a":"zzz"}` + strings.Repeat("\x00", 16)))
	const msg = "The nextToken provided is not valid."
	return []hostileCase{
		{name: "ListAddons with a ListClusters token", category: catToken, op: "ListAddons", method: "GET", path: c + "/addons?nextToken=" + q(e.clustersToken),
			status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListAddons with its own token bit-flipped", category: catToken, op: "ListAddons", method: "GET",
			path: c + "/addons?nextToken=" + q(flip(e.addonsToken)), status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListAddons with base64 garbage", category: catToken, op: "ListAddons", method: "GET", path: c + "/addons?nextToken=" + q("!!not*base64!!"),
			status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListAddons of another cluster with this cluster's token", category: catToken, op: "ListAddons", method: "GET",
			path: "/clusters/" + e.other + "/addons?nextToken=" + q(e.addonsToken), status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListAccessEntries with another cluster's token", category: catToken, op: "ListAccessEntries", method: "GET",
			path: c + "/access-entries?nextToken=" + q(e.otherEntriesToken), status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListAccessEntries with a truncated token", category: catToken, op: "ListAccessEntries", method: "GET",
			path: c + "/access-entries?nextToken=" + q(e.entriesToken[:len(e.entriesToken)-1]), status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListClusters with a ListAddons token", category: catToken, op: "ListClusters", method: "GET", path: "/clusters?nextToken=" + q(e.addonsToken),
			status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListClusters with a padded token", category: catToken, op: "ListClusters", method: "GET", path: "/clusters?nextToken=" + q(e.clustersToken+"=="),
			status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListClusters with a token of 5000 characters", category: catToken, op: "ListClusters", method: "GET",
			path: "/clusters?nextToken=" + strings.Repeat("A", 5000), status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListClusters with a line break inside its token", category: catToken, op: "ListClusters", method: "GET",
			path: "/clusters?nextToken=" + q(e.clustersToken[:8]+"\n"+e.clustersToken[8:]), status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListClusters with a forged unsigned token", category: catToken, op: "ListClusters", method: "GET", path: "/clusters?nextToken=" + forged,
			status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListPodIdentityAssociations with a ListAddons token", category: catToken, op: "ListPodIdentityAssociations", method: "GET",
			path: c + "/pod-identity-associations?nextToken=" + q(e.addonsToken), status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListUpdates with a ListAddons token", category: catToken, op: "ListUpdates", method: "GET", path: c + "/updates?nextToken=" + q(e.addonsToken),
			status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListInsights with a ListAddons token", category: catToken, op: "ListInsights", method: "POST", path: c + "/insights",
			body: `{"nextToken": "` + e.addonsToken + `"}`, status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "ListAssociatedAccessPolicies with a ListAccessEntries token", category: catToken, op: "ListAssociatedAccessPolicies", method: "GET",
			path: e.entryPath() + "/access-policies?nextToken=" + q(e.entriesToken), status: s400, exception: ire, member: "nextToken", message: msg},
		{name: "ListAccessPolicies with a ListClusters token", category: catToken, op: "ListAccessPolicies", method: "GET",
			path: "/access-policies?nextToken=" + q(e.clustersToken), status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "DescribeAddonVersions with a ListClusters token", category: catToken, op: "DescribeAddonVersions", method: "GET",
			path: "/addons/supported-versions?nextToken=" + q(e.clustersToken), status: s400, exception: ipe, member: "nextToken", message: msg},
		{name: "DescribeClusterVersions with a ListAddons token", category: catToken, op: "DescribeClusterVersions", method: "GET",
			path: "/cluster-versions?nextToken=" + q(e.addonsToken), status: s400, exception: ipe, member: "nextToken", message: msg},
	}
}

// pathCases put dot segments and encoded slashes in path labels. Encoded,
// they stay inside their label: a name that contains them (refused by a
// pattern, or found nowhere), never a route to another resource.
func (e *env) pathCases() []hostileCase {
	c := e.clusterPath()
	return []hostileCase{
		{name: "DescribeCluster name ..%2F then the cluster", category: catPath, op: "DescribeCluster", method: "GET", path: "/clusters/..%2F" + e.cluster,
			status: s400, exception: "ClientException", member: "name", message: namePattern},
		{name: "DescribeCluster name %2e%2e", category: catPath, op: "DescribeCluster", method: "GET", path: "/clusters/%2e%2e",
			status: s400, exception: "ClientException", member: "name", message: namePattern},
		{name: "DeleteCluster name with an encoded slash", category: catPath, op: "DeleteCluster", method: "DELETE", path: "/clusters/" + e.cluster + "%2F",
			status: s400, exception: "InvalidRequestException", member: "name", message: namePattern},
		{name: "DescribeAddon name ..%2F..%2Fclusters", category: catPath, op: "DescribeAddon", method: "GET", path: c + "/addons/..%2F..%2Fclusters",
			status: s404, exception: rnf},
		{name: "DeleteAddon name %2e%2e%2Fkube-proxy", category: catPath, op: "DeleteAddon", method: "DELETE", path: c + "/addons/%2e%2e%2Fkube-proxy",
			status: s404, exception: rnf},
		{name: "UpdateAddon name with encoded dot segments", category: catPath, op: "UpdateAddon", method: "POST",
			path: c + "/addons/coredns%2F%2e%2e%2Fkube-proxy/update", body: `{}`, status: s404, exception: rnf},
		// Literal dot segments and doubled slashes reach the façade as sent
		// (server/server.go routes only the operational paths through a
		// ServeMux, which would redirect them to the cleaned path): a dot
		// segment makes a path no operation has, an empty segment an empty
		// name.
		{name: "DescribeAddon literal dot-dot segment", category: catPath, op: "DescribeAddon", method: "GET", path: c + "/addons/../addons/coredns",
			status: s404, exception: uoe},
		{name: "ListAddons doubled slash", category: catPath, op: "ListAddons", method: "GET", path: "/clusters//addons",
			status: s400, exception: ipe, member: "clusterName"},
		{name: "DeletePodIdentityAssociation literal dot segment", category: catPath, op: "DeletePodIdentityAssociation", method: "DELETE",
			path: c + "/pod-identity-associations/./" + e.podID, status: s404, exception: uoe},
		{name: "DescribeUpdate update id ..%2F", category: catPath, op: "DescribeUpdate", method: "GET", path: c + "/updates/..%2F" + e.updateID,
			status: s404, exception: rnf},
		{name: "DescribeInsight id with dot segments", category: catPath, op: "DescribeInsight", method: "GET", path: c + "/insights/%2e%2e%2F" + e.insightID,
			status: s404, exception: rnf},
		{name: "DescribePodIdentityAssociation id ..%2F", category: catPath, op: "DescribePodIdentityAssociation", method: "GET",
			path: c + "/pod-identity-associations/..%2F" + e.podID, status: s400, exception: ipe},
		{name: "DeletePodIdentityAssociation id of 5000 characters", category: catSize, op: "DeletePodIdentityAssociation", method: "DELETE",
			path: c + "/pod-identity-associations/" + strings.Repeat("a", 5000), status: s400, exception: ipe, member: "associationId"},
		{name: "DeletePodIdentityAssociation id with an encoded slash", category: catPath, op: "DeletePodIdentityAssociation", method: "DELETE",
			path: c + "/pod-identity-associations/" + e.podID + "%2F", status: s400, exception: ipe},
		{name: "DeleteAccessEntry principal not an ARN", category: catARN, op: "DeleteAccessEntry", method: "DELETE",
			path: c + "/access-entries/not-an-arn", status: s404, exception: rnf},
		{name: "DeleteAccessEntry principal with dot segments", category: catPath, op: "DeleteAccessEntry", method: "DELETE",
			path: c + "/access-entries/" + escape("arn:aws:iam::000000000000:role/x/../dev"), status: s404, exception: rnf},
		{name: "ListAssociatedAccessPolicies principal ..", category: catPath, op: "ListAssociatedAccessPolicies", method: "GET",
			path: c + "/access-entries/%2e%2e/access-policies", status: s404, exception: rnf},
		{name: "ListTagsForResource ARN with dot segments", category: catPath, op: "ListTagsForResource", method: "GET",
			path: tagsPath("arn:aws:eks:" + e.region + ":" + e.account + ":cluster/x/../" + e.cluster), status: s404, exception: nf},
	}
}

// unicodeCases use look-alikes of existing names: nothing normalizes a
// name, so each is either refused by a pattern or names nothing.
func (e *env) unicodeCases() []hostileCase {
	c := e.clusterPath()
	cyr := strings.Replace(e.cluster, "o", "\u043e", 1) // Cyrillic о
	return []hostileCase{
		{name: "DescribeCluster Cyrillic look-alike of the cluster", category: catUnicode, op: "DescribeCluster", method: "GET",
			path: "/clusters/" + url.PathEscape(cyr), status: s400, exception: "ClientException", member: "name", message: namePattern},
		{name: "DeleteCluster fullwidth look-alike of the cluster", category: catUnicode, op: "DeleteCluster", method: "DELETE",
			path: "/clusters/" + url.PathEscape("\uff48\uff4f\uff53\uff54\uff49\uff4c\uff45-1"), status: s400, exception: "InvalidRequestException", member: "name", message: namePattern},
		{name: "UpdateClusterConfig name with a zero-width joiner", category: catUnicode, op: "UpdateClusterConfig", method: "POST",
			path: "/clusters/" + url.PathEscape("hostile\u200d-1") + "/update-config", body: `{"deletionProtection": true}`, status: s400, exception: ipe, member: "name", message: namePattern},
		{name: "CreateCluster Cyrillic name", category: catUnicode, op: "CreateCluster", method: "POST", path: "/clusters",
			body:   `{"name": "\u0430dmin", "roleArn": "` + clusterRole + `", "resourcesVpcConfig": {"subnetIds": ["subnet-a"]}}`,
			status: s400, exception: ipe, member: "name"},
		{name: "CreateAddon Cyrillic look-alike add-on", category: catUnicode, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: `{"addonName": "c\u043eredns"}`, status: s400, exception: ipe, message: "Addon \"c\u043eredns\" specified is not supported."},
		{name: "DescribeAddon name with a zero-width joiner", category: catUnicode, op: "DescribeAddon", method: "GET",
			path: c + "/addons/" + url.PathEscape("core\u200ddns"), status: s404, exception: rnf},
		{name: "UpdateAddon name with a Unicode hyphen", category: catUnicode, op: "UpdateAddon", method: "POST",
			path: c + "/addons/" + url.PathEscape("kube\u2010proxy") + "/update", body: `{}`, status: s404, exception: rnf},
		{name: "ListAddons cluster name in another case", category: catUnicode, op: "ListAddons", method: "GET", path: "/clusters/Hostile-1/addons",
			status: s404, exception: rnf},
		{name: "DescribeAccessEntry principal with a Cyrillic letter", category: catUnicode, op: "DescribeAccessEntry", method: "GET",
			path: c + "/access-entries/" + escape("arn:aws:iam::000000000000:role/d\u0435v"), status: s404, exception: rnf},
		{name: "CreateAccessEntry principal with a fullwidth colon", category: catUnicode, op: "CreateAccessEntry", method: "POST",
			path: c + "/access-entries", body: `{"principalArn": "arn:aws:iam::000000000000\uff1arole/dev"}`, status: s400, exception: ipe,
			member: "principalArn"},
		{name: "UpdatePodIdentityAssociation id with a Cyrillic a", category: catUnicode, op: "UpdatePodIdentityAssociation", method: "POST",
			path: c + "/pod-identity-associations/" + url.PathEscape("\u0430"+e.podID[1:]), body: `{"roleArn": "` + podRole + `"}`,
			status: s400, exception: ipe},
		{name: "DescribeUpdate id with a combining accent", category: catUnicode, op: "DescribeUpdate", method: "GET",
			path: c + "/updates/" + url.PathEscape(e.updateID+"\u0301"), status: s404, exception: rnf},
		{name: "TagResource ARN with a Cyrillic a in arn", category: catUnicode, op: "TagResource", method: "POST",
			path: tagsPath("\u0430" + e.clusterARN[1:]), body: `{"tags": {"a": "b"}}`, status: s400, exception: bre, member: "resource ARN"},
		{name: "UpdateClusterVersion version with fullwidth digits", category: catUnicode, op: "UpdateClusterVersion", method: "POST",
			path: c + "/updates", body: `{"version": "\uff11.\uff13\uff16"}`, status: s400, exception: ipe, member: "version"},
	}
}

// controlCases put NUL, CR and LF in names, members and query values:
// refused by a pattern or a semantic check, or naming nothing; a CR LF in
// a label never becomes a response header. (A tag value may hold them: the
// EKS model gives TagValue no pattern, so the tag value cases are aimed at
// resources that do not exist.)
func (e *env) controlCases() []hostileCase {
	c := e.clusterPath()
	return []hostileCase{
		{name: "DescribeCluster name with a NUL", category: catControl, op: "DescribeCluster", method: "GET", path: c + "%00",
			status: s400, exception: "ClientException", member: "name", message: namePattern},
		// Bytes that are not UTF-8, in a path label and a query value: the
		// member's validation error (server/validation), never a 500.
		{name: "ListAddons cluster name not UTF-8", category: catControl, op: "ListAddons", method: "GET", path: "/clusters/%FF/addons",
			status: s400, exception: ipe, member: "clusterName", message: "Member must be valid UTF-8"},
		{name: "ListUpdates addon name query not UTF-8", category: catControl, op: "ListUpdates", method: "GET", path: c + "/updates?addonName=%FE",
			status: s400, exception: ipe, member: "addonName", message: "Member must be valid UTF-8"},
		{name: "DeleteCluster name with CR LF", category: catControl, op: "DeleteCluster", method: "DELETE", path: c + "%0D%0AX-Injected:%201",
			status: s400, exception: "InvalidRequestException", member: "name", message: namePattern},
		{name: "CreateCluster name with a NUL", category: catControl, op: "CreateCluster", method: "POST", path: "/clusters",
			body:   `{"name": "nul\u0000name", "roleArn": "` + clusterRole + `", "resourcesVpcConfig": {"subnetIds": ["subnet-a"]}}`,
			status: s400, exception: ipe, member: "name"},
		{name: "CreateAddon add-on name with a line feed", category: catControl, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: `{"addonName": "coredns\n"}`, status: s400, exception: ipe, message: "Addon \"coredns\\n\" specified is not supported."},
		{name: "DeleteAddon name with a NUL", category: catControl, op: "DeleteAddon", method: "DELETE", path: c + "/addons/coredns%00",
			status: s404, exception: rnf},
		{name: "UpdateAccessEntry username with a NUL", category: catControl, op: "UpdateAccessEntry", method: "POST", path: e.entryPath(),
			body: `{"username": "dev\u0000admin"}`, status: s400, exception: ipe, member: "username"},
		{name: "CreateAccessEntry Kubernetes group with CR LF", category: catControl, op: "CreateAccessEntry", method: "POST", path: c + "/access-entries",
			body: `{"principalArn": "arn:aws:iam::000000000000:role/ctl", "kubernetesGroups": ["dev\r\nsystem:masters"]}`, status: s400, exception: ipe,
			member: "kubernetes group", message: "control characters"},
		{name: "CreatePodIdentityAssociation service account with a NUL", category: catControl, op: "CreatePodIdentityAssociation", method: "POST",
			path: c + "/pod-identity-associations", body: `{"namespace": "default", "serviceAccount": "app\u0000", "roleArn": "` + podRole + `"}`,
			status: s400, exception: ipe, member: "serviceAccount"},
		{name: "DescribePodIdentityAssociation id with a NUL", category: catControl, op: "DescribePodIdentityAssociation", method: "GET",
			path: c + "/pod-identity-associations/" + e.podID[:len(e.podID)-1] + "%00", status: s400, exception: ipe, member: "associationId"},
		{name: "TagResource tag value with CR LF on an absent add-on", category: catControl, op: "TagResource", method: "POST",
			path: tagsPath(strings.Replace(e.addonARN, "/coredns/", "/vpc-cni/", 1)), body: `{"tags": {"team": "a\r\nb"}}`, status: s404, exception: nf},
		{name: "TagResource tag key with a NUL and the aws: prefix", category: catControl, op: "TagResource", method: "POST",
			path: tagsPath(e.clusterARN), body: `{"tags": {"aws:\u0000": "x"}}`, status: s400, exception: bre, member: "aws:"},
		{name: "UntagResource tag key of a lone NUL on an absent cluster", category: catControl, op: "UntagResource", method: "DELETE",
			path: tagsPath(strings.Replace(e.clusterARN, e.cluster, "absent", 1)) + "?tagKeys=%00", status: s404, exception: nf},
		{name: "DescribeAddonConfiguration version with a NUL", category: catControl, op: "DescribeAddonConfiguration", method: "GET",
			path: "/addons/configuration-schemas?addonName=coredns&addonVersion=v1%00", status: s404, exception: rnf},
		{name: "DescribeInsight id with a NUL", category: catControl, op: "DescribeInsight", method: "GET", path: c + "/insights/" + e.insightID + "%00",
			status: s404, exception: rnf},
		{name: "DescribeInsightsRefresh cluster name with a NUL", category: catControl, op: "DescribeInsightsRefresh", method: "GET",
			path: c + "%00/insights-refresh", status: s400, exception: ipe, member: "name", message: namePattern},
		{name: "CancelUpdate cluster name with a NUL", category: catControl, op: "CancelUpdate", method: "POST",
			path: c + "%00/updates/00000000-0000-0000-0000-000000000000/cancel-update", body: `{}`, status: s400, exception: ipe,
			member: "name", message: namePattern},
		{name: "CancelUpdate update id with a NUL", category: catControl, op: "CancelUpdate", method: "POST",
			path: c + "/updates/00000000%00/cancel-update", body: `{}`, status: s404, exception: rnf},
	}
}

// dupQueryCases repeat query parameters that take one value: AWS's
// "Member must have one value"; and tagKeys lists beyond the model's size.
func (e *env) dupQueryCases() []hostileCase {
	c := e.clusterPath()
	return []hostileCase{
		{name: "ListAddons maxResults twice", category: catDupQuery, op: "ListAddons", method: "GET", path: c + "/addons?maxResults=1&maxResults=2",
			status: s400, exception: ipe, member: "maxResults", message: "Member must have one value"},
		{name: "ListUpdates nextToken twice", category: catDupQuery, op: "ListUpdates", method: "GET", path: c + "/updates?nextToken=a&nextToken=b",
			status: s400, exception: ipe, member: "nextToken"},
		{name: "DeleteAddon preserve twice", category: catDupQuery, op: "DeleteAddon", method: "DELETE", path: c + "/addons/coredns?preserve=true&preserve=false",
			status: s400, exception: ipe, member: "preserve"},
		{name: "DescribeAddonConfiguration addonVersion twice", category: catDupQuery, op: "DescribeAddonConfiguration", method: "GET",
			path: "/addons/configuration-schemas?addonName=coredns&addonVersion=a&addonVersion=b", status: s400, exception: ipe, member: "addonVersion"},
		{name: "DescribeUpdate addonName twice", category: catDupQuery, op: "DescribeUpdate", method: "GET",
			path: c + "/updates/" + e.updateID + "?addonName=coredns&addonName=kube-proxy", status: s400, exception: ipe, member: "addonName"},
		{name: "UntagResource 51 repeated tagKeys", category: catDupQuery, op: "UntagResource", method: "DELETE",
			path: tagsPath(e.clusterARN) + "?" + strings.TrimSuffix(strings.Repeat("tagKeys=a&", 51), "&"), status: s400, exception: bre,
			member: "tagKeys", message: "Member must have length less than or equal to 50"},
		{name: "UntagResource empty tagKeys", category: catDupQuery, op: "UntagResource", method: "DELETE", path: tagsPath(e.clusterARN) + "?tagKeys=",
			status: s400, exception: bre, member: "tagKeys"},
		{name: "ListAccessEntries associatedPolicyArn twice", category: catDupQuery, op: "ListAccessEntries", method: "GET",
			path:   c + "/access-entries?associatedPolicyArn=" + url.QueryEscape(viewPolicy) + "&associatedPolicyArn=" + url.QueryEscape(viewPolicy),
			status: s400, exception: ipe, member: "associatedPolicyArn"},
		{name: "ListPodIdentityAssociations serviceAccount twice", category: catDupQuery, op: "ListPodIdentityAssociations", method: "GET",
			path: c + "/pod-identity-associations?serviceAccount=a&serviceAccount=b", status: s400, exception: ipe, member: "serviceAccount"},
		{name: "DescribeAddonVersions kubernetesVersion twice", category: catDupQuery, op: "DescribeAddonVersions", method: "GET",
			path: "/addons/supported-versions?kubernetesVersion=1.35&kubernetesVersion=1.34", status: s400, exception: ipe, member: "kubernetesVersion"},
		{name: "ListClusters maxResults empty", category: catDupQuery, op: "ListClusters", method: "GET", path: "/clusters?maxResults=",
			status: s400, exception: ipe, member: "maxResults"},
	}
}

func manyTags(n int) string {
	parts := make([]string, n)
	for i := range n {
		parts[i] = fmt.Sprintf(`"k%02d": "v"`, i)
	}
	return `{"tags": {` + strings.Join(parts, ", ") + `}}`
}

// tagCases break the tag limits: 50 tags, keys of 1 to 128 and values of
// up to 256 characters (the model), and the reserved aws: prefix in any
// case (tagging.Validate).
func (e *env) tagCases() []hostileCase {
	c := e.clusterPath()
	key129 := strings.Repeat("k", 129)
	val257 := strings.Repeat("v", 257)
	return []hostileCase{
		{name: "TagResource 51 tags", category: catTags, op: "TagResource", method: "POST", path: tagsPath(e.clusterARN), body: manyTags(51),
			status: s400, exception: bre, member: "tags", message: "Member must have length less than or equal to 50"},
		{name: "TagResource key of 129 characters", category: catTags, op: "TagResource", method: "POST", path: tagsPath(e.addonARN),
			body: `{"tags": {"` + key129 + `": "v"}}`, status: s400, exception: bre, member: "tags", message: "Map keys must satisfy constraint"},
		{name: "TagResource value of 257 characters", category: catTags, op: "TagResource", method: "POST", path: tagsPath(e.entryARN),
			body: `{"tags": {"k": "` + val257 + `"}}`, status: s400, exception: bre, member: "tags", message: "Map value must satisfy constraint"},
		{name: "TagResource aws: prefixed key", category: catTags, op: "TagResource", method: "POST", path: tagsPath(e.podARN),
			body: `{"tags": {"aws:eks:cluster-name": "x"}}`, status: s400, exception: bre, member: "aws:"},
		{name: "TagResource AWS: prefixed key in upper case", category: catTags, op: "TagResource", method: "POST", path: tagsPath(e.clusterARN),
			body: `{"tags": {"AWS:Owner": "x"}}`, status: s400, exception: bre, member: "AWS:"},
		{name: "TagResource empty key", category: catTags, op: "TagResource", method: "POST", path: tagsPath(e.clusterARN),
			body: `{"tags": {"": "x"}}`, status: s400, exception: bre, member: "tags"},
		{name: "UntagResource key of 129 characters", category: catTags, op: "UntagResource", method: "DELETE",
			path: tagsPath(e.clusterARN) + "?tagKeys=" + key129, status: s400, exception: bre, member: "tagKeys"},
		{name: "UntagResource aws: prefixed key", category: catTags, op: "UntagResource", method: "DELETE",
			path: tagsPath(e.clusterARN) + "?tagKeys=aws%3Aeks%3Acluster-name", status: s400, exception: bre, member: "aws:"},
		{name: "CreateCluster 51 tags", category: catTags, op: "CreateCluster", method: "POST", path: "/clusters",
			body: `{"name": "tagged", "roleArn": "` + clusterRole + `", "resourcesVpcConfig": {"subnetIds": ["subnet-a"]}, ` +
				strings.TrimPrefix(manyTags(51), "{"), status: s400, exception: ipe, member: "tags"},
		{name: "CreateAddon aws: prefixed tag", category: catTags, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: `{"addonName": "vpc-cni", "tags": {"aws:x": "y"}}`, status: s400, exception: ipe, member: "aws:"},
		{name: "CreateAccessEntry tag value of 257 characters", category: catTags, op: "CreateAccessEntry", method: "POST", path: c + "/access-entries",
			body: `{"principalArn": "arn:aws:iam::000000000000:role/tagged", "tags": {"k": "` + val257 + `"}}`, status: s400, exception: ipe, member: "tags"},
		{name: "CreatePodIdentityAssociation tag key of 129 characters", category: catTags, op: "CreatePodIdentityAssociation", method: "POST",
			path:   c + "/pod-identity-associations",
			body:   `{"namespace": "default", "serviceAccount": "tagged", "roleArn": "` + podRole + `", "tags": {"` + key129 + `": "v"}}`,
			status: s400, exception: ipe, member: "tags"},
	}
}

// idempotencyCases send clientRequestTokens that are not 1 to 64
// printable ASCII characters, or not strings (server/idempotency).
func (e *env) idempotencyCases() []hostileCase {
	c := e.clusterPath()
	long := strings.Repeat("t", 65)
	return []hostileCase{
		{name: "CreateCluster clientRequestToken of 65 characters", category: catIdem, op: "CreateCluster", method: "POST", path: "/clusters",
			body:   `{"name": "idem", "roleArn": "` + clusterRole + `", "resourcesVpcConfig": {"subnetIds": ["subnet-a"]}, "clientRequestToken": "` + long + `"}`,
			status: s400, exception: ipe, member: "clientRequestToken"},
		{name: "CreateAddon clientRequestToken a number", category: catIdem, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: `{"addonName": "vpc-cni", "clientRequestToken": 12345}`, status: s400, exception: ipe, member: "clientRequestToken",
			message: "Member must be a string"},
		{name: "UpdateAddon clientRequestToken with a NUL", category: catIdem, op: "UpdateAddon", method: "POST", path: c + "/addons/coredns/update",
			body: `{"clientRequestToken": "tok\u0000en"}`, status: s400, exception: ipe, member: "clientRequestToken"},
		{name: "CreateAccessEntry clientRequestToken with a tab", category: catIdem, op: "CreateAccessEntry", method: "POST", path: c + "/access-entries",
			body: `{"principalArn": "` + e.entryPrincipal + `", "clientRequestToken": "tok\ten"}`, status: s400, exception: ipe,
			member: "clientRequestToken"},
		{name: "UpdateAccessEntry clientRequestToken a list", category: catIdem, op: "UpdateAccessEntry", method: "POST", path: e.entryPath(),
			body: `{"clientRequestToken": ["a"]}`, status: s400, exception: ipe, member: "clientRequestToken", message: "Member must be a string"},
		{name: "CreatePodIdentityAssociation clientRequestToken of 65 characters", category: catIdem, op: "CreatePodIdentityAssociation", method: "POST",
			path:   c + "/pod-identity-associations",
			body:   `{"namespace": "default", "serviceAccount": "idem", "roleArn": "` + podRole + `", "clientRequestToken": "` + long + `"}`,
			status: s400, exception: ipe, member: "clientRequestToken"},
		{name: "UpdatePodIdentityAssociation clientRequestToken with spaces", category: catIdem, op: "UpdatePodIdentityAssociation", method: "POST",
			path: e.podPath(), body: `{"roleArn": "` + podRole + `", "clientRequestToken": "a b"}`, status: s400, exception: ipe, member: "clientRequestToken"},
		{name: "UpdateClusterConfig clientRequestToken an object", category: catIdem, op: "UpdateClusterConfig", method: "POST", path: c + "/update-config",
			body: `{"deletionProtection": true, "clientRequestToken": {}}`, status: s400, exception: ipe, member: "clientRequestToken"},
		{name: "UpdateClusterVersion clientRequestToken of 65 characters", category: catIdem, op: "UpdateClusterVersion", method: "POST", path: c + "/updates",
			body: `{"version": "1.36", "clientRequestToken": "` + long + `"}`, status: s400, exception: ipe, member: "clientRequestToken"},
	}
}

// mediaCases send bodies of other media types: the façade reads every
// body as JSON whatever Content-Type says, so a form, XML or multipart
// body is SerializationException and a JSON body without a Content-Type
// is judged as JSON.
func (e *env) mediaCases() []hostileCase {
	c := e.clusterPath()
	return []hostileCase{
		{name: "CreateAddon form-encoded body", category: catMedia, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: "addonName=vpc-cni", contentType: "application/x-www-form-urlencoded", status: s400, exception: ser, message: notJ},
		{name: "TagResource XML body", category: catMedia, op: "TagResource", method: "POST", path: tagsPath(e.clusterARN),
			body: `<tags><a>b</a></tags>`, contentType: "application/xml", status: s400, exception: ser, message: notJ},
		{name: "UpdateAccessEntry JSON body without a Content-Type", category: catMedia, op: "UpdateAccessEntry", method: "POST", path: e.entryPath(),
			body: `{"username": ["x"]}`, contentType: noContentType, status: s400, exception: ipe, member: "username"},
		{name: "CreatePodIdentityAssociation multipart body", category: catMedia, op: "CreatePodIdentityAssociation", method: "POST",
			path: c + "/pod-identity-associations", body: "--b\r\nContent-Disposition: form-data; name=\"namespace\"\r\n\r\ndefault\r\n--b--",
			contentType: "multipart/form-data; boundary=b", status: s400, exception: ser, message: notJ},
		{name: "ListInsights text/plain body", category: catMedia, op: "ListInsights", method: "POST", path: c + "/insights",
			body: "maxResults: 5", contentType: "text/plain", status: s400, exception: ser, message: notJ},
		{name: "StartInsightsRefresh XML body", category: catMedia, op: "StartInsightsRefresh", method: "POST", path: c + "/insights-refresh",
			body: `<refresh/>`, contentType: "application/xml", status: s400, exception: ser, message: notJ},
		{name: "UpdateClusterVersion gzip-declared plain body", category: catMedia, op: "UpdateClusterVersion", method: "POST", path: c + "/updates",
			body: "\x1f\x8b not really gzip", header: map[string]string{"Content-Encoding": "gzip"}, status: s400, exception: ser, message: notJ},
	}
}

// methodCases use a method a path does not serve (405) or a path no
// operation has (404): UnknownOperationException either way.
func (e *env) methodCases() []hostileCase {
	c := e.clusterPath()
	return []hostileCase{
		{name: "PUT on a cluster", category: catMethod, op: "DescribeCluster", method: "PUT", path: c, body: `{}`, status: s405, exception: uoe},
		{name: "PATCH on an add-on", category: catMethod, op: "UpdateAddon", method: "PATCH", path: c + "/addons/coredns", body: `{}`,
			status: s405, exception: uoe},
		{name: "GET on update-config", category: catMethod, op: "UpdateClusterConfig", method: "GET", path: c + "/update-config",
			status: s405, exception: uoe},
		{name: "DELETE on the add-on list", category: catMethod, op: "ListAddons", method: "DELETE", path: c + "/addons", status: s405, exception: uoe},
		{name: "GET on insights of a cluster is not ListInsights", category: catMethod, op: "ListInsights", method: "GET", path: c + "/insights",
			status: s405, exception: uoe},
		{name: "GET on cancel-update", category: catMethod, op: "CancelUpdate", method: "GET",
			path: c + "/updates/00000000-0000-0000-0000-000000000000/cancel-update", status: s405, exception: uoe},
		{name: "PUT on insights-refresh", category: catMethod, op: "StartInsightsRefresh", method: "PUT", path: c + "/insights-refresh", body: `{}`,
			status: s405, exception: uoe},
		{name: "DELETE on insights-refresh", category: catMethod, op: "DescribeInsightsRefresh", method: "DELETE", path: c + "/insights-refresh",
			status: s405, exception: uoe},
		{name: "POST on access policies", category: catMethod, op: "ListAccessPolicies", method: "POST", path: "/access-policies", body: `{}`,
			status: s405, exception: uoe},
		{name: "PUT on tags", category: catMethod, op: "TagResource", method: "PUT", path: tagsPath(e.clusterARN), body: `{"tags": {"a": "b"}}`,
			status: s405, exception: uoe},
		{name: "DELETE on cluster versions", category: catMethod, op: "DescribeClusterVersions", method: "DELETE", path: "/cluster-versions",
			status: s405, exception: uoe},
		{name: "POST on an access entry's single policy", category: catMethod, op: "DisassociateAccessPolicy", method: "POST",
			path: e.entryPath() + "/access-policies/" + escape(viewPolicy), body: `{}`, status: s405, exception: uoe},
		{name: "unknown path under a cluster", category: catMethod, op: "", method: "GET", path: c + "/nodegroups-v2", status: s404, exception: uoe},
		{name: "POST / with a JSON body is no operation", category: catMethod, op: "", method: "POST", path: "/", body: `{"Action": "GetCallerIdentity"}`,
			status: s404, exception: uoe},
		{name: "unknown top-level path", category: catMethod, op: "", method: "GET", path: "/admin", status: s404, exception: uoe},
		{name: "a versioned prefix AWS does not have", category: catMethod, op: "", method: "GET", path: "/2017-11-01/clusters", status: s404, exception: uoe},
		{name: "DescribeAddonVersions with a trailing slash", category: catMethod, op: "DescribeAddonVersions", method: "GET",
			path: "/addons/supported-versions/", status: s404, exception: uoe},
	}
}

// smuggleCases name a resource in the path and another in the query or
// the body under the path member's name: the path decides, a path member
// in the body is refused (it is not a body member in AWS's model), and a
// query parameter never overrides the path.
func (e *env) smuggleCases() []hostileCase {
	c := e.clusterPath()
	absentARN := strings.Replace(e.clusterARN, e.cluster, "absent", 1)
	return []hostileCase{
		{name: "DescribeCluster of an absent cluster with the real name in the query", category: catSmuggle, op: "DescribeCluster", method: "GET",
			path: "/clusters/absent?name=" + e.cluster, status: s404, exception: rnf, message: "absent"},
		{name: "DescribeAddon of an absent add-on with real names in the query", category: catSmuggle, op: "DescribeAddon", method: "GET",
			path: c + "/addons/absent?addonName=coredns&clusterName=" + e.cluster, status: s404, exception: rnf, message: "absent"},
		{name: "ListTagsForResource of an absent ARN with the real one in the query", category: catSmuggle, op: "ListTagsForResource", method: "GET",
			path: tagsPath(absentARN) + "?resourceArn=" + url.QueryEscape(e.clusterARN), status: s404, exception: nf, message: "absent"},
		{name: "CreateAddon body naming another cluster", category: catSmuggle, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: `{"addonName": "vpc-cni", "clusterName": "` + e.other + `"}`, status: s400, exception: ipe, member: `"clusterName"`},
		{name: "UpdateAccessEntry body naming another principal", category: catSmuggle, op: "UpdateAccessEntry", method: "POST", path: e.entryPath(),
			body: `{"principalArn": "arn:aws:iam::000000000000:role/other", "username": "x"}`, status: s400, exception: ipe, member: `"principalArn"`},
		{name: "DeletePodIdentityAssociation of another id in the query", category: catSmuggle, op: "DeletePodIdentityAssociation", method: "DELETE",
			path: c + "/pod-identity-associations/a-00000000000000000?associationId=" + e.podID, status: s404, exception: rnf},
		{name: "UpdateClusterVersion body naming another cluster", category: catSmuggle, op: "UpdateClusterVersion", method: "POST", path: c + "/updates",
			body: `{"name": "` + e.other + `", "version": "1.36"}`, status: s400, exception: ipe, member: `"name"`},
		{name: "CancelUpdate body naming another cluster", category: catSmuggle, op: "CancelUpdate", method: "POST",
			path: c + "/updates/00000000-0000-0000-0000-000000000000/cancel-update", body: `{"name": "` + e.other + `"}`,
			status: s400, exception: ipe, member: `"name"`},
		{name: "StartInsightsRefresh body naming another cluster", category: catSmuggle, op: "StartInsightsRefresh", method: "POST",
			path: c + "/insights-refresh", body: `{"clusterName": "` + e.other + `"}`, status: s400, exception: ipe, member: "clusterName"},
		{name: "DescribeInsightsRefresh of an absent cluster with the real name in the query", category: catSmuggle, op: "DescribeInsightsRefresh",
			method: "GET", path: "/clusters/absent/insights-refresh?clusterName=" + e.cluster, status: s404, exception: rnf, message: "absent"},
	}
}
