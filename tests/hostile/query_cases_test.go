package hostile

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/saltbush/saltbush/server/servertest"
)

const formType = "application/x-www-form-urlencoded"

// form is a query-protocol body.
func form(pairs ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		v.Add(pairs[i], pairs[i+1])
	}
	return v.Encode()
}

// stsForm is an STS request's form body.
func stsForm(action string, pairs ...string) string {
	return form(append([]string{"Action", action, "Version", "2011-06-15"}, pairs...)...)
}

// iamForm is an IAM request's form body.
func iamForm(action string, pairs ...string) string {
	return form(append([]string{"Action", action, "Version", "2010-05-08"}, pairs...)...)
}

// queryCases are the query-protocol operations on the façade's address
// (server/sts): XML ErrorResponse documents with the codes STS and IAM
// send (ValidationError, InvalidInput, SignatureDoesNotMatch, ...).
func (e *env) queryCases() []hostileCase {
	const (
		gci = "sts:GetCallerIdentity"
		ar  = "sts:AssumeRole"
		lop = "iam:ListOpenIDConnectProviders"
		gop = "iam:GetOpenIDConnectProvider"
	)
	// IAM is global: its requests are signed for us-east-1.
	iam := signedAs("iam", "us-east-1", 0)
	role := "arn:aws:iam::" + e.account + ":role/hostile"
	provider := "arn:aws:iam::" + e.account + ":oidc-provider/" + strings.TrimPrefix(e.issuer, "https://")
	var tags []string
	for i := range 51 {
		tags = append(tags, fmt.Sprintf("Tags.member.%d.Key", i+1), fmt.Sprintf("k%02d", i), fmt.Sprintf("Tags.member.%d.Value", i+1), "v")
	}
	hugeForm := stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "s", "ExternalId", strings.Repeat("x", 1<<20))
	q := func(c hostileCase) hostileCase {
		c.query, c.method, c.path = true, http.MethodPost, "/"
		if c.contentType == "" {
			c.contentType = formType
		}
		return c
	}
	return []hostileCase{
		q(hostileCase{name: "GetCallerIdentity without Version", category: catSignature, op: gci, body: form("Action", "GetCallerIdentity"),
			status: s400, exception: "InvalidAction"}),
		q(hostileCase{name: "GetCallerIdentity signed for eks", category: catSignature, op: gci, body: stsForm("GetCallerIdentity"),
			sign: signedAs("eks", "", 0), status: s403, exception: "SignatureDoesNotMatch"}),
		q(hostileCase{name: "GetCallerIdentity body swapped after signing", category: catSignature, op: gci, body: stsForm("GetCallerIdentity"),
			tamper: replaceBody(stsForm("GetCallerIdentity", "X", "y")), status: s403, exception: "SignatureDoesNotMatch"}),
		q(hostileCase{name: "GetCallerIdentity unknown access key", category: catSignature, op: gci, body: stsForm("GetCallerIdentity"),
			sign: func(e *env, t *testing.T, req *http.Request, body []byte) {
				signer{creds: servertest.Creds{AccessKeyID: "AKIAHOSTILE000000000", SecretAccessKey: "x"}, service: "sts", region: e.region}.sign(t, req, body)
			}, status: s403, exception: "InvalidClientTokenId"}),
		q(hostileCase{name: "GetCallerIdentity without a signature", category: catSignature, op: gci, body: stsForm("GetCallerIdentity"),
			sign: unsigned, status: s403, exception: "MissingAuthenticationToken"}),
		q(hostileCase{name: "GetCallerIdentity malformed form body", category: catJSON, op: gci, body: "Action=GetCallerIdentity&Version=2011-06-15&x=%zz",
			status: s400, exception: "MalformedQueryString"}),
		q(hostileCase{name: "AssumeRole without its required members", category: catARN, op: ar, body: stsForm("AssumeRole"),
			status: s400, exception: "ValidationError", member: "roleArn", message: "2 validation errors detected"}),
		q(hostileCase{name: "AssumeRole DurationSeconds 899", category: catRange, op: ar,
			body:   stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "hostile", "DurationSeconds", "899"),
			status: s400, exception: "ValidationError", member: "durationSeconds", message: "greater than or equal to 900"}),
		q(hostileCase{name: "AssumeRole DurationSeconds 2^63", category: catRange, op: ar,
			body:   stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "hostile", "DurationSeconds", "9223372036854775808"),
			status: s400, exception: "ValidationError", member: "durationSeconds", message: "less than or equal to 43200"}),
		q(hostileCase{name: "AssumeRole DurationSeconds not a number", category: catType, op: ar,
			body:   stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "hostile", "DurationSeconds", "1h"),
			status: s400, exception: "ValidationError", member: "durationSeconds", message: "Member must be an integer"}),
		q(hostileCase{name: "AssumeRole RoleSessionName with a NUL", category: catControl, op: ar,
			body:   stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "host\x00ile"),
			status: s400, exception: "ValidationError", member: "roleSessionName"}),
		q(hostileCase{name: "AssumeRole RoleSessionName twice", category: catDupQuery, op: ar,
			body:   stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "x", "RoleSessionName", "hostile"),
			status: s400, exception: "ValidationError", member: "roleSessionName"}),
		q(hostileCase{name: "AssumeRole role of a foreign account", category: catARN, op: ar,
			body:   stsForm("AssumeRole", "RoleArn", "arn:aws:iam::111111111111:role/hostile", "RoleSessionName", "hostile"),
			status: s403, exception: "AccessDenied"}),
		q(hostileCase{name: "AssumeRole RoleArn too short", category: catARN, op: ar, body: stsForm("AssumeRole", "RoleArn", "arn:aws:iam::", "RoleSessionName", "hostile"),
			status: s400, exception: "ValidationError", member: "roleArn"}),
		q(hostileCase{name: "AssumeRole session policy without a Statement", category: catType, op: ar,
			body:   stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "hostile", "Policy", `{"Version":"2012-10-17"}`),
			status: s400, exception: "MalformedPolicyDocument", message: "Statement"}),
		q(hostileCase{name: "AssumeRole with managed session policies", category: catType, op: ar,
			body: stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "hostile",
				"PolicyArns.member.1.arn", "arn:aws:iam::aws:policy/AdministratorAccess"),
			status: s400, exception: "ValidationError", member: "PolicyArns"}),
		q(hostileCase{name: "AssumeRole 51 session tags", category: catTags, op: ar,
			body:   stsForm("AssumeRole", append([]string{"RoleArn", role, "RoleSessionName", "hostile"}, tags...)...),
			status: s400, exception: "ValidationError", member: "tags"}),
		q(hostileCase{name: "AssumeRole tag keys equal but for case", category: catTags, op: ar,
			body: stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "hostile", "Tags.member.1.Key", "Team", "Tags.member.1.Value", "a",
				"Tags.member.2.Key", "team", "Tags.member.2.Value", "b"),
			status: s400, exception: "ValidationError", message: "Duplicate tag keys"}),
		q(hostileCase{name: "AssumeRole tag value with CR LF", category: catControl, op: ar,
			body:   stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "hostile", "Tags.member.1.Key", "team", "Tags.member.1.Value", "a\r\nb"),
			status: s400, exception: "ValidationError", member: "tags.1.member.value"}),
		q(hostileCase{name: "AssumeRole SourceIdentity with a Cyrillic letter", category: catUnicode, op: ar,
			body:   stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "hostile", "SourceIdentity", "\u0430dmin"),
			status: s400, exception: "ValidationError", member: "sourceIdentity"}),
		q(hostileCase{name: "AssumeRole body over the limit", category: catSize, op: ar, bodyBytes: []byte(hugeForm),
			status: s413, exception: "RequestEntityTooLarge"}),
		q(hostileCase{name: "AssumeRole signed 20 minutes ago", category: catSignature, op: ar,
			body: stsForm("AssumeRole", "RoleArn", role, "RoleSessionName", "hostile"), sign: signedAs("sts", "", -20*time.Minute),
			status: s403, exception: "SignatureDoesNotMatch"}),
		q(hostileCase{name: "ListOpenIDConnectProviders signed for sts", category: catSignature, op: lop, body: iamForm("ListOpenIDConnectProviders"),
			status: s403, exception: "SignatureDoesNotMatch"}),
		q(hostileCase{name: "ListOpenIDConnectProviders under STS's version", category: catMethod, op: lop,
			body: form("Action", "ListOpenIDConnectProviders", "Version", "2011-06-15"), status: s400, exception: "InvalidAction"}),
		q(hostileCase{name: "ListOpenIDConnectProviders signature bit-flipped", category: catSignature, op: lop, body: iamForm("ListOpenIDConnectProviders"),
			sign: iam, tamper: func(r *http.Request) { authField(r, "Signature", flipHex) }, status: s403, exception: "SignatureDoesNotMatch"}),
		q(hostileCase{name: "ListOpenIDConnectProviders Version twice", category: catDupQuery, op: lop,
			body: form("Action", "ListOpenIDConnectProviders", "Version", "2011-06-15", "Version", "2010-05-08"), sign: iam,
			status: s403, exception: "SignatureDoesNotMatch"}),
		q(hostileCase{name: "GetOpenIDConnectProvider without its ARN", category: catARN, op: gop, body: iamForm("GetOpenIDConnectProvider"),
			sign: iam, status: s400, exception: "InvalidInput", member: "openIDConnectProviderArn"}),
		q(hostileCase{name: "GetOpenIDConnectProvider of a foreign account", category: catARN, op: gop,
			body: iamForm("GetOpenIDConnectProvider", "OpenIDConnectProviderArn", strings.Replace(provider, e.account, "111111111111", 1)),
			sign: iam, status: s403, exception: "AccessDenied"}),
		q(hostileCase{name: "GetOpenIDConnectProvider a role ARN", category: catARN, op: gop,
			body: iamForm("GetOpenIDConnectProvider", "OpenIDConnectProviderArn", role), sign: iam, status: s400, exception: "InvalidInput"}),
		q(hostileCase{name: "GetOpenIDConnectProvider with dot segments", category: catPath, op: gop,
			body: iamForm("GetOpenIDConnectProvider", "OpenIDConnectProviderArn", provider+"/../../x"), sign: iam, status: s404, exception: "NoSuchEntity"}),
		q(hostileCase{name: "GetOpenIDConnectProvider with a Cyrillic letter", category: catUnicode, op: gop,
			body: iamForm("GetOpenIDConnectProvider", "OpenIDConnectProviderArn", strings.Replace(provider, "hostile", "h\u043estile", 1)),
			sign: iam, status: s404, exception: "NoSuchEntity"}),
		{name: "GetCallerIdentity as a GET with its query changed after signing", category: catSignature, op: gci, query: true, method: http.MethodGet,
			path: "/?" + stsForm("GetCallerIdentity"), tamper: func(r *http.Request) { r.URL.RawQuery += "&Extra=1" },
			status: s403, exception: "SignatureDoesNotMatch"},
		q(hostileCase{name: "an STS action saltbush does not answer", category: catMethod, op: "", body: stsForm("GetSessionToken"),
			status: s400, exception: "InvalidAction"}),
	}
}

// oidcProviderCases are IAM's operations that make, change and delete OIDC
// providers, and the tag listing (server/sts/oidc_write.go): IAM's codes,
// ValidationError for the model's constraints, InvalidInput,
// LimitExceeded, EntityAlreadyExists and NoSuchEntity for what IAM
// refuses. The account's one provider is derived from the cluster's
// issuer (e.issuer); a change to it would make it a record, so every case
// is refused before that.
func (e *env) oidcProviderCases() []hostileCase {
	const (
		cop  = "iam:CreateOpenIDConnectProvider"
		dop  = "iam:DeleteOpenIDConnectProvider"
		uot  = "iam:UpdateOpenIDConnectProviderThumbprint"
		acid = "iam:AddClientIDToOpenIDConnectProvider"
		rcid = "iam:RemoveClientIDFromOpenIDConnectProvider"
		top  = "iam:TagOpenIDConnectProvider"
		uop  = "iam:UntagOpenIDConnectProvider"
		lopt = "iam:ListOpenIDConnectProviderTags"
	)
	provider := "arn:aws:iam::" + e.account + ":oidc-provider/" + strings.TrimPrefix(e.issuer, "https://")
	foreign := strings.Replace(provider, e.account, "111111111111", 1)
	absent := "arn:aws:iam::" + e.account + ":oidc-provider/absent.hostile.example/id/X"
	role := "arn:aws:iam::" + e.account + ":role/hostile"
	tp := strings.Repeat("a", 40)
	i := func(c hostileCase, action string, pairs ...string) hostileCase {
		c.query, c.method, c.path, c.contentType = true, http.MethodPost, "/", formType
		if c.sign == nil {
			c.sign = signedAs("iam", "us-east-1", 0)
		}
		c.body = iamForm(action, pairs...)
		return c
	}
	var clientIDs, tags []string
	for n := range 101 {
		clientIDs = append(clientIDs, fmt.Sprintf("ClientIDList.member.%d", n+1), fmt.Sprintf("client-%03d", n))
	}
	for n := range 51 {
		tags = append(tags, fmt.Sprintf("Tags.member.%d.Key", n+1), fmt.Sprintf("k%02d", n), fmt.Sprintf("Tags.member.%d.Value", n+1), "v")
	}
	return []hostileCase{
		i(hostileCase{name: "CreateOpenIDConnectProvider of the cluster's issuer", category: catARN, op: cop,
			status: s409, exception: "EntityAlreadyExists", message: e.issuer}, "CreateOpenIDConnectProvider",
			"Url", e.issuer, "ClientIDList.member.1", "sts.amazonaws.com"),
		i(hostileCase{name: "CreateOpenIDConnectProvider over http", category: catARN, op: cop, status: s400, exception: "InvalidInput"},
			"CreateOpenIDConnectProvider", "Url", "http://oidc.hostile.example/id/PLAIN"),
		i(hostileCase{name: "CreateOpenIDConnectProvider URL with user information", category: catARN, op: cop, status: s400, exception: "InvalidInput"},
			"CreateOpenIDConnectProvider", "Url", "https://admin@oidc.hostile.example/id/USER"),
		i(hostileCase{name: "CreateOpenIDConnectProvider without its Url", category: catARN, op: cop,
			status: s400, exception: "ValidationError", member: "url"}, "CreateOpenIDConnectProvider", "ClientIDList.member.1", "sts.amazonaws.com"),
		i(hostileCase{name: "CreateOpenIDConnectProvider 101 client ids", category: catSize, op: cop,
			status: s409, exception: "LimitExceeded", message: "ClientIdsPerOpenIdConnectProvider"}, "CreateOpenIDConnectProvider",
			append([]string{"Url", "https://oidc.hostile.example/id/MANY"}, clientIDs...)...),
		i(hostileCase{name: "CreateOpenIDConnectProvider thumbprint that is not hex", category: catType, op: cop,
			status: s400, exception: "InvalidInput", message: "Thumbprint"}, "CreateOpenIDConnectProvider",
			"Url", "https://oidc.hostile.example/id/THUMB", "ThumbprintList.member.1", strings.Repeat("z", 40)),
		i(hostileCase{name: "CreateOpenIDConnectProvider tag keys equal but for case", category: catTags, op: cop,
			status: s400, exception: "InvalidInput", message: "Duplicate tag keys"}, "CreateOpenIDConnectProvider",
			"Url", "https://oidc.hostile.example/id/TAGS", "Tags.member.1.Key", "Team", "Tags.member.1.Value", "a",
			"Tags.member.2.Key", "team", "Tags.member.2.Value", "b"),
		i(hostileCase{name: "CreateOpenIDConnectProvider signed for sts", category: catSignature, op: cop, sign: signedAs("sts", "", 0),
			status: s403, exception: "SignatureDoesNotMatch"}, "CreateOpenIDConnectProvider", "Url", "https://oidc.hostile.example/id/STS"),
		i(hostileCase{name: "DeleteOpenIDConnectProvider of the cluster's issuer", category: catARN, op: dop,
			status: s400, exception: "InvalidInput", message: "cannot be deleted"}, "DeleteOpenIDConnectProvider", "OpenIDConnectProviderArn", provider),
		i(hostileCase{name: "DeleteOpenIDConnectProvider without its ARN", category: catARN, op: dop,
			status: s400, exception: "ValidationError", member: "openIDConnectProviderArn"}, "DeleteOpenIDConnectProvider"),
		i(hostileCase{name: "DeleteOpenIDConnectProvider of a foreign account", category: catARN, op: dop,
			status: s403, exception: "AccessDenied"}, "DeleteOpenIDConnectProvider", "OpenIDConnectProviderArn", foreign),
		i(hostileCase{name: "DeleteOpenIDConnectProvider that does not exist", category: catARN, op: dop,
			status: s404, exception: "NoSuchEntity"}, "DeleteOpenIDConnectProvider", "OpenIDConnectProviderArn", absent),
		i(hostileCase{name: "DeleteOpenIDConnectProvider with dot segments", category: catPath, op: dop,
			status: s404, exception: "NoSuchEntity"}, "DeleteOpenIDConnectProvider", "OpenIDConnectProviderArn", provider+"/../../x"),
		i(hostileCase{name: "UpdateOpenIDConnectProviderThumbprint without its list", category: catARN, op: uot,
			status: s400, exception: "ValidationError", member: "thumbprintList"}, "UpdateOpenIDConnectProviderThumbprint",
			"OpenIDConnectProviderArn", provider),
		i(hostileCase{name: "UpdateOpenIDConnectProviderThumbprint of 39 characters", category: catRange, op: uot,
			status: s400, exception: "ValidationError", member: "thumbprintList"}, "UpdateOpenIDConnectProviderThumbprint",
			"OpenIDConnectProviderArn", provider, "ThumbprintList.member.1", tp[:39]),
		i(hostileCase{name: "UpdateOpenIDConnectProviderThumbprint six thumbprints", category: catSize, op: uot,
			status: s400, exception: "InvalidInput", message: "Thumbprint list"}, "UpdateOpenIDConnectProviderThumbprint",
			"OpenIDConnectProviderArn", provider, "ThumbprintList.member.1", strings.Repeat("1", 40), "ThumbprintList.member.2", strings.Repeat("2", 40),
			"ThumbprintList.member.3", strings.Repeat("3", 40), "ThumbprintList.member.4", strings.Repeat("4", 40),
			"ThumbprintList.member.5", strings.Repeat("5", 40), "ThumbprintList.member.6", strings.Repeat("6", 40)),
		i(hostileCase{name: "UpdateOpenIDConnectProviderThumbprint with a Cyrillic letter", category: catUnicode, op: uot,
			status: s400, exception: "InvalidInput", message: "Thumbprint"}, "UpdateOpenIDConnectProviderThumbprint",
			"OpenIDConnectProviderArn", provider, "ThumbprintList.member.1", tp[:39]+"а"),
		i(hostileCase{name: "AddClientIDToOpenIDConnectProvider without its ClientID", category: catARN, op: acid,
			status: s400, exception: "ValidationError", member: "clientID"}, "AddClientIDToOpenIDConnectProvider", "OpenIDConnectProviderArn", provider),
		i(hostileCase{name: "AddClientIDToOpenIDConnectProvider ClientID of 256 characters", category: catRange, op: acid,
			status: s400, exception: "ValidationError", member: "clientID"}, "AddClientIDToOpenIDConnectProvider",
			"OpenIDConnectProviderArn", provider, "ClientID", strings.Repeat("c", 256)),
		i(hostileCase{name: "AddClientIDToOpenIDConnectProvider a role ARN", category: catARN, op: acid,
			status: s400, exception: "InvalidInput"}, "AddClientIDToOpenIDConnectProvider", "OpenIDConnectProviderArn", role, "ClientID", "x"),
		i(hostileCase{name: "RemoveClientIDFromOpenIDConnectProvider empty ClientID", category: catRange, op: rcid,
			status: s400, exception: "ValidationError", member: "clientID"}, "RemoveClientIDFromOpenIDConnectProvider",
			"OpenIDConnectProviderArn", provider, "ClientID", ""),
		i(hostileCase{name: "RemoveClientIDFromOpenIDConnectProvider ARN too short", category: catARN, op: rcid,
			status: s400, exception: "ValidationError", member: "openIDConnectProviderArn"}, "RemoveClientIDFromOpenIDConnectProvider",
			"OpenIDConnectProviderArn", "arn:aws:iam::", "ClientID", "x"),
		i(hostileCase{name: "RemoveClientIDFromOpenIDConnectProvider of a provider that does not exist", category: catARN, op: rcid,
			status: s404, exception: "NoSuchEntity"}, "RemoveClientIDFromOpenIDConnectProvider", "OpenIDConnectProviderArn", absent, "ClientID", "x"),
		i(hostileCase{name: "TagOpenIDConnectProvider without Tags", category: catTags, op: top,
			status: s400, exception: "ValidationError", member: "tags"}, "TagOpenIDConnectProvider", "OpenIDConnectProviderArn", provider),
		i(hostileCase{name: "TagOpenIDConnectProvider 51 tags", category: catTags, op: top,
			status: s400, exception: "ValidationError", member: "tags"}, "TagOpenIDConnectProvider",
			append([]string{"OpenIDConnectProviderArn", provider}, tags...)...),
		i(hostileCase{name: "TagOpenIDConnectProvider tag key with CR LF", category: catControl, op: top,
			status: s400, exception: "ValidationError", member: "tags.1.member.key"}, "TagOpenIDConnectProvider",
			"OpenIDConnectProviderArn", provider, "Tags.member.1.Key", "a\r\nb", "Tags.member.1.Value", "v"),
		i(hostileCase{name: "TagOpenIDConnectProvider tag keys equal but for case", category: catTags, op: top,
			status: s400, exception: "InvalidInput", message: "Duplicate tag keys"}, "TagOpenIDConnectProvider", "OpenIDConnectProviderArn", provider,
			"Tags.member.1.Key", "Team", "Tags.member.1.Value", "a", "Tags.member.2.Key", "TEAM", "Tags.member.2.Value", "b"),
		i(hostileCase{name: "UntagOpenIDConnectProvider without TagKeys", category: catTags, op: uop,
			status: s400, exception: "ValidationError", member: "tagKeys"}, "UntagOpenIDConnectProvider", "OpenIDConnectProviderArn", provider),
		i(hostileCase{name: "UntagOpenIDConnectProvider tag key of 129 characters", category: catTags, op: uop,
			status: s400, exception: "ValidationError", member: "tagKeys"}, "UntagOpenIDConnectProvider",
			"OpenIDConnectProviderArn", provider, "TagKeys.member.1", strings.Repeat("k", 129)),
		i(hostileCase{name: "UntagOpenIDConnectProvider of a foreign account", category: catARN, op: uop,
			status: s403, exception: "AccessDenied"}, "UntagOpenIDConnectProvider", "OpenIDConnectProviderArn", foreign, "TagKeys.member.1", "team"),
		i(hostileCase{name: "ListOpenIDConnectProviderTags MaxItems 0", category: catRange, op: lopt,
			status: s400, exception: "ValidationError", member: "maxItems"}, "ListOpenIDConnectProviderTags",
			"OpenIDConnectProviderArn", provider, "MaxItems", "0"),
		i(hostileCase{name: "ListOpenIDConnectProviderTags MaxItems not a number", category: catType, op: lopt,
			status: s400, exception: "ValidationError", member: "maxItems"}, "ListOpenIDConnectProviderTags",
			"OpenIDConnectProviderArn", provider, "MaxItems", "ten"),
		i(hostileCase{name: "ListOpenIDConnectProviderTags Marker of no page", category: catToken, op: lopt,
			status: s400, exception: "InvalidInput", message: "Marker"}, "ListOpenIDConnectProviderTags",
			"OpenIDConnectProviderArn", provider, "Marker", "7"),
		i(hostileCase{name: "ListOpenIDConnectProviderTags MaxItems twice", category: catDupQuery, op: lopt,
			status: s400, exception: "ValidationError", member: "maxItems"}, "ListOpenIDConnectProviderTags",
			"OpenIDConnectProviderArn", provider, "MaxItems", "1001", "MaxItems", "1"),
	}
}
