package hostile

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/saltbush/saltbush/server/servertest"
)

const msgMismatch = "The request signature we calculated does not match the signature you provided."

// signedAs signs as the development administrator for another signing
// name, region or time (offset from now).
func signedAs(service, region string, offset time.Duration) func(e *env, t *testing.T, req *http.Request, body []byte) {
	return func(e *env, t *testing.T, req *http.Request, body []byte) {
		t.Helper()
		if region == "" {
			region = e.region
		}
		signer{creds: e.dev, service: service, region: region, at: time.Now().Add(offset)}.sign(t, req, body)
	}
}

// signedWith signs with other credentials for eks.
func signedWith(creds func(e *env) servertest.Creds) func(e *env, t *testing.T, req *http.Request, body []byte) {
	return func(e *env, t *testing.T, req *http.Request, body []byte) {
		t.Helper()
		e.srv.Sign(t, req, body, creds(e))
	}
}

// unsigned sends the request without any signature.
func unsigned(*env, *testing.T, *http.Request, []byte) {}

// authField rewrites one component of the Authorization header.
func authField(r *http.Request, name string, f func(string) string) {
	h := r.Header.Get("Authorization")
	alg, rest, _ := strings.Cut(h, " ")
	parts := strings.Split(rest, ", ")
	for i, p := range parts {
		if k, v, ok := strings.Cut(p, "="); ok && k == name {
			parts[i] = k + "=" + f(v)
		}
	}
	r.Header.Set("Authorization", alg+" "+strings.Join(parts, ", "))
}

// flipHex changes the last hex digit of s.
func flipHex(s string) string {
	b := []byte(s)
	last := len(b) - 1
	if b[last] == '0' {
		b[last] = '1'
	} else {
		b[last] = '0'
	}
	return string(b)
}

// replaceBody sends body instead of what was signed.
func replaceBody(body string) func(*http.Request) {
	return func(r *http.Request) {
		r.Body = io.NopCloser(bytes.NewReader([]byte(body)))
		r.ContentLength = int64(len(body))
	}
}

// signatureCases tamper with the signature after signing, or sign for
// the wrong key, service, region or time: AWS's 403s, and the tampered
// request (a DELETE among them) never runs.
func (e *env) signatureCases() []hostileCase {
	c := e.clusterPath()
	unknownKey := func(e *env) servertest.Creds {
		return servertest.Creds{AccessKeyID: "AKIAHOSTILE000000000", SecretAccessKey: "x"}
	}
	wrongSecret := func(e *env) servertest.Creds {
		d := e.dev
		d.SecretAccessKey = "wrong" + d.SecretAccessKey
		return d
	}
	return []hostileCase{
		{name: "DeleteCluster signature bit-flipped", category: catSignature, op: "DeleteCluster", method: "DELETE", path: c,
			tamper: func(r *http.Request) { authField(r, "Signature", flipHex) }, status: s403, exception: ise, message: msgMismatch},
		{name: "DeleteAddon signed as a GET", category: catSignature, op: "DeleteAddon", method: "GET", path: c + "/addons/coredns",
			tamper: func(r *http.Request) { r.Method = http.MethodDelete }, status: s403, exception: ise, message: msgMismatch},
		{name: "CreateAddon body swapped after signing", category: catSignature, op: "CreateAddon", method: "POST", path: c + "/addons",
			body: `{"addonName": "vpc-cni", "addonVersion": "x"}`, tamper: replaceBody(`{"addonName": "vpc-cni", "addonVersion": "y"}`),
			status: s403, exception: ise, message: msgMismatch},
		{name: "DeleteAccessEntry path changed after signing", category: catSignature, op: "DeleteAccessEntry", method: "DELETE",
			path:   c + "/access-entries/" + escape("arn:aws:iam::000000000000:role/absent"),
			tamper: func(r *http.Request) { r.URL, _ = url.Parse(e.srv.URL + e.entryPath()) },
			status: s403, exception: ise, message: msgMismatch},
		{name: "ListAddons query changed after signing", category: catSignature, op: "ListAddons", method: "GET", path: c + "/addons?maxResults=1",
			tamper: func(r *http.Request) { r.URL.RawQuery = "maxResults=2" }, status: s403, exception: ise, message: msgMismatch},
		{name: "DescribeCluster without any signature", category: catSignature, op: "DescribeCluster", method: "GET", path: c,
			sign: unsigned, status: s403, exception: mat, message: "Missing Authentication Token"},
		{name: "ListClusters unknown access key", category: catSignature, op: "ListClusters", method: "GET", path: "/clusters",
			sign: signedWith(unknownKey), status: s403, exception: uce, message: "The security token included in the request is invalid."},
		{name: "UpdateClusterConfig wrong secret key", category: catSignature, op: "UpdateClusterConfig", method: "POST", path: c + "/update-config",
			body: `{"deletionProtection": true}`, sign: signedWith(wrongSecret), status: s403, exception: ise, message: msgMismatch},
		{name: "DisassociateAccessPolicy signed for sts", category: catSignature, op: "DisassociateAccessPolicy", method: "DELETE",
			path: e.entryPath() + "/access-policies/" + escape(viewPolicy), sign: signedAs("sts", "", 0), status: s403, exception: ise},
		{name: "DescribeAddonVersions signed for another region", category: catSignature, op: "DescribeAddonVersions", method: "GET",
			path: "/addons/supported-versions", sign: signedAs("eks", "eu-west-1", 0), status: s403, exception: ise, message: "eu-west-1"},
		{name: "UpdateAddon signed 20 minutes ago", category: catSignature, op: "UpdateAddon", method: "POST", path: c + "/addons/coredns/update",
			body: `{}`, sign: signedAs("eks", "", -20*time.Minute), status: s403, exception: ise},
		{name: "DeletePodIdentityAssociation signed 20 minutes ahead", category: catSignature, op: "DeletePodIdentityAssociation", method: "DELETE",
			path: e.podPath(), sign: signedAs("eks", "", 20*time.Minute), status: s403, exception: ise},
		{name: "ListAccessPolicies two Authorization headers", category: catSignature, op: "ListAccessPolicies", method: "GET", path: "/access-policies",
			tamper: func(r *http.Request) { r.Header.Add("Authorization", r.Header.Get("Authorization")) }, status: s403, exception: ise},
		{name: "AssociateAccessPolicy algorithm AWS4-HMAC-SHA1", category: catSignature, op: "AssociateAccessPolicy", method: "POST",
			path: e.entryPath() + "/access-policies", body: `{"policyArn": "` + viewPolicy + `", "accessScope": {"type": "cluster"}}`,
			tamper: func(r *http.Request) {
				r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256", "AWS4-HMAC-SHA1", 1))
			}, status: s403, exception: ise},
		{name: "DescribeInsight X-Amz-Date removed", category: catSignature, op: "DescribeInsight", method: "GET", path: c + "/insights/" + e.insightID,
			tamper: func(r *http.Request) { r.Header.Del("X-Amz-Date") }, status: s403, exception: ise},
		{name: "StartInsightsRefresh wrong secret key", category: catSignature, op: "StartInsightsRefresh", method: "POST", path: c + "/insights-refresh",
			body: `{}`, sign: signedWith(wrongSecret), status: s403, exception: ise, message: msgMismatch},
		{name: "DescribeInsightsRefresh signed for another region", category: catSignature, op: "DescribeInsightsRefresh", method: "GET",
			path: c + "/insights-refresh", sign: signedAs("eks", "eu-west-1", 0), status: s403, exception: ise, message: "eu-west-1"},
		{name: "DescribePodIdentityAssociation signed header changed", category: catSignature, op: "DescribePodIdentityAssociation", method: "GET",
			path: e.podPath(), header: map[string]string{"X-Amz-Meta-Who": "a"},
			tamper: func(r *http.Request) { r.Header.Set("X-Amz-Meta-Who", "b") }, status: s403, exception: ise, message: msgMismatch},
		{name: "ListTagsForResource header and presigned signatures both", category: catSignature, op: "ListTagsForResource", method: "GET",
			path: tagsPath(e.clusterARN), tamper: func(r *http.Request) { r.URL.RawQuery = "X-Amz-Algorithm=AWS4-HMAC-SHA256" },
			status: s403, exception: ise},
		{name: "DescribeUpdate session token added after signing", category: catSignature, op: "DescribeUpdate", method: "GET",
			path: c + "/updates/" + e.updateID, tamper: func(r *http.Request) { r.Header.Set("X-Amz-Security-Token", "forged") },
			status: s403, exception: ise},
		{name: "UntagResource forged session token", category: catSignature, op: "UntagResource", method: "DELETE",
			path: tagsPath(e.clusterARN) + "?tagKeys=team", header: map[string]string{"X-Amz-Security-Token": "forged-session-token"},
			status: s403, exception: uce},
		{name: "CreateAccessEntry credential scope with a bad date", category: catSignature, op: "CreateAccessEntry", method: "POST",
			path: c + "/access-entries", body: `{"principalArn": "arn:aws:iam::000000000000:role/sig"}`,
			tamper: func(r *http.Request) {
				authField(r, "Credential", func(v string) string {
					p := strings.Split(v, "/")
					p[1] = "20200101"
					return strings.Join(p, "/")
				})
			}, status: s403, exception: ise},
		{name: "ListAssociatedAccessPolicies empty SignedHeaders", category: catSignature, op: "ListAssociatedAccessPolicies", method: "GET",
			path: e.entryPath() + "/access-policies", tamper: func(r *http.Request) { authField(r, "SignedHeaders", func(string) string { return "" }) },
			status: s403, exception: ise},
		{name: "DescribeAccessEntry SignedHeaders without host", category: catSignature, op: "DescribeAccessEntry", method: "GET", path: e.entryPath(),
			tamper: func(r *http.Request) { authField(r, "SignedHeaders", func(string) string { return "x-amz-date" }) }, status: s403, exception: ise},
		{name: "ListPodIdentityAssociations signature not hex", category: catSignature, op: "ListPodIdentityAssociations", method: "GET",
			path: c + "/pod-identity-associations", tamper: func(r *http.Request) {
				authField(r, "Signature", func(v string) string { return strings.Repeat("z", len(v)) })
			}, status: s403, exception: ise},
		{name: "CreateCluster presigned URL expired", category: catSignature, op: "CreateCluster", method: "POST", path: "/clusters",
			body: `{}`, sign: unsigned, tamper: func(r *http.Request) {
				r.URL.RawQuery = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + url.QueryEscape(e.dev.AccessKeyID+"/20200101/"+e.region+"/eks/aws4_request") +
					"&X-Amz-Date=20200101T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature=" + strings.Repeat("0", 64)
			}, status: s403, exception: ise},
	}
}
