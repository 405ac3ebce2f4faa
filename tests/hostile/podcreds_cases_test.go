package hostile

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/protobuf/types/known/timestamppb"

	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/oidc"
	"github.com/saltbush/saltbush/store"
)

// catIdentity: a web identity or pod token that is forged, foreign,
// expired or for another audience.
const catIdentity = "forged, foreign or expired identity token"

// s409 is IAM's status for EntityAlreadyExists and LimitExceeded.
const s409 = http.StatusConflict

// The exceptions of EKS Auth (botocore eks-auth/2023-11-26) that the EKS
// façade does not send.
const (
	ite = "InvalidTokenException"
	ete = "ExpiredTokenException"
)

// issuerKid is the kid of the hosted issuer's one key.
const issuerKid = "hostile-1"

// hostIssuer makes the cluster's issuer one saltbush hosts, as its
// executor would (server/delivery/keys.go): the issuer's keys are written
// through the test's own store, their private half kept to mint tokens.
// It also makes an OIDC provider for an issuer saltbush does not host.
func (e *env) hostIssuer(t *testing.T) {
	t.Helper()
	ctx := ctxT(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e.issuerKey = key
	raw, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: issuerKid, Algorithm: "ES256", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := oidc.ParseKeySet(raw)
	if err != nil {
		t.Fatal(err)
	}
	rec := &storagev1.ServiceAccountIssuerRecord{Issuer: e.issuer, ClusterUid: e.clusterUID, AccountId: e.account, ClusterName: e.cluster,
		Jwks: keys.JSON(), UpdatedAt: timestamppb.Now(), Epoch: 1, InstanceId: "i-0123456789abcdef0"}
	if _, err := e.srv.Store(t).Commit(ctx, store.NewTxn().Create(oidc.IssuerKey(e.issuer), rec)); err != nil {
		t.Fatalf("host the issuer's keys: %v", err)
	}
	if _, err := e.srv.IAM().CreateOIDCProvider(ctx, &storagev1.OpenIDConnectProviderRecord{Url: e.elsewhere, AccountId: e.account,
		ClientIds: []string{"sts.amazonaws.com"}}); err != nil {
		t.Fatalf("CreateOIDCProvider %s: %v", e.elsewhere, err)
	}
}

// claims are what a token minted here says.
type claims struct {
	iss, aud  string
	ns, sa    string
	pod       bool
	expiresIn time.Duration
	// key signs instead of the issuer's key (under the issuer's kid).
	key *ecdsa.PrivateKey
	kid string
}

// token mints a service-account token as the cluster's apiserver would:
// for default/app (the pod identity association's), bound to a pod, for
// STS's audience, valid for an hour, unless c says otherwise.
func (e *env) token(c claims) string {
	if c.iss == "" {
		c.iss = e.issuer
	}
	if c.aud == "" {
		c.aud = "sts.amazonaws.com"
	}
	if c.ns == "" {
		c.ns, c.sa = "default", "app"
	}
	if c.expiresIn == 0 {
		c.expiresIn = time.Hour
	}
	if c.key == nil {
		c.key = e.issuerKey
	}
	if c.kid == "" {
		c.kid = issuerKid
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: c.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", c.kid))
	if err != nil {
		panic(err)
	}
	now := time.Now()
	k8s := map[string]any{"namespace": c.ns, "serviceaccount": map[string]string{"name": c.sa, "uid": "sa-uid"}}
	if c.pod {
		k8s["pod"] = map[string]string{"name": "app-0", "uid": "pod-uid"}
	}
	tok, err := jwt.Signed(sig).Claims(jwt.Claims{
		Issuer: c.iss, Subject: "system:serviceaccount:" + c.ns + ":" + c.sa, Audience: jwt.Audience{c.aud},
		Expiry: jwt.NewNumericDate(now.Add(c.expiresIn)), IssuedAt: jwt.NewNumericDate(now.Add(-2 * time.Hour)),
	}).Claims(map[string]any{"kubernetes.io": k8s}).Serialize()
	if err != nil {
		panic(err)
	}
	return tok
}

// otherKey is a key saltbush does not hold.
func otherKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

// withPayload replaces a token's claims after it was signed.
func withPayload(tok, payload string) string {
	parts := strings.Split(tok, ".")
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(payload))
	return strings.Join(parts, ".")
}

// webIdentityCases are AssumeRoleWithWebIdentity requests. AWS answers the
// operation without a signature (the token is the caller's proof), so
// they are sent unsigned and answered with STS's codes, never
// MissingAuthenticationToken.
func (e *env) webIdentityCases() []hostileCase {
	const op = "sts:AssumeRoleWithWebIdentity"
	role := "arn:aws:iam::" + e.account + ":role/hostile"
	good := e.token(claims{})
	w := func(c hostileCase, pairs ...string) hostileCase {
		c.op, c.query, c.method, c.path, c.contentType = op, true, http.MethodPost, "/", formType
		if c.sign == nil {
			c.sign = unsigned
		}
		if c.body == "" {
			c.body = stsForm("AssumeRoleWithWebIdentity", pairs...)
		}
		return c
	}
	exchange := func(roleARN, token string) []string {
		return []string{"RoleArn", roleARN, "RoleSessionName", "hostile", "WebIdentityToken", token}
	}
	return []hostileCase{
		w(hostileCase{name: "AssumeRoleWithWebIdentity unsigned is answered: a token that is no JWT", category: catSignature,
			status: s400, exception: "InvalidIdentityToken", message: "not a signed JWT"}, exchange(role, "not-a-jwt")...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity without its required members", category: catARN,
			status: s400, exception: "ValidationError", member: "webIdentityToken", message: "3 validation errors detected"}),
		w(hostileCase{name: "AssumeRoleWithWebIdentity token over 20000 characters", category: catSize,
			status: s400, exception: "ValidationError", member: "webIdentityToken", message: "less than or equal to 20000"},
			exchange(role, strings.Repeat("a", 20001))...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity DurationSeconds 43201", category: catRange,
			status: s400, exception: "ValidationError", member: "durationSeconds", message: "less than or equal to 43200"},
			append(exchange(role, good), "DurationSeconds", "43201")...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity with a ProviderId", category: catType,
			status: s400, exception: "ValidationError", member: "ProviderId"}, append(exchange(role, good), "ProviderId", "graph.facebook.com")...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity session policy without a Statement", category: catType,
			status: s400, exception: "MalformedPolicyDocument"}, append(exchange(role, good), "Policy", `{"Version":"2012-10-17"}`)...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity with managed session policies", category: catType,
			status: s400, exception: "ValidationError", member: "PolicyArns"}, append(exchange(role, good),
			"PolicyArns.member.1.arn", "arn:aws:iam::aws:policy/AdministratorAccess")...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity RoleSessionName with a NUL", category: catControl,
			status: s400, exception: "ValidationError", member: "roleSessionName"},
			"RoleArn", role, "RoleSessionName", "host\x00ile", "WebIdentityToken", good),
		w(hostileCase{name: "AssumeRoleWithWebIdentity role of a foreign account", category: catARN,
			status: s400, exception: "InvalidIdentityToken", message: "No OpenIDConnect provider found"},
			exchange("arn:aws:iam::111111111111:role/hostile", good)...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity issuer of no provider of the account", category: catIdentity,
			status: s400, exception: "InvalidIdentityToken", message: "No OpenIDConnect provider found"},
			exchange(role, e.token(claims{iss: "https://unknown.hostile.example/id/X"}))...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity issuer saltbush does not host", category: catIdentity,
			status: s400, exception: "IDPCommunicationError"}, exchange(role, e.token(claims{iss: e.elsewhere}))...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity expired token", category: catIdentity,
			status: s400, exception: "ExpiredTokenException", message: "Token expired"}, exchange(role, e.token(claims{expiresIn: -time.Hour}))...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity token signed by another key under the issuer's kid", category: catIdentity,
			status: s400, exception: "InvalidIdentityToken", message: "does not verify"}, exchange(role, e.token(claims{key: otherKey()}))...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity token of a kid the issuer does not have", category: catIdentity,
			status: s400, exception: "InvalidIdentityToken", message: "No key of the issuer"}, exchange(role, e.token(claims{kid: "hostile-2"}))...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity claims changed after signing", category: catIdentity,
			status: s400, exception: "InvalidIdentityToken"},
			exchange(role, withPayload(good, `{"iss":"`+e.issuer+`","sub":"system:serviceaccount:kube-system:admin","aud":"sts.amazonaws.com","exp":4102444800}`))...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity token without a signature", category: catIdentity,
			status: s400, exception: "InvalidIdentityToken"}, exchange(role, good[:strings.LastIndexByte(good, '.')+1])...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity token for EKS Pod Identity's audience", category: catIdentity,
			status: s400, exception: "InvalidIdentityToken", message: "audience"}, exchange(role, e.token(claims{aud: "pods.eks.amazonaws.com", pod: true}))...),
		w(hostileCase{name: "AssumeRoleWithWebIdentity role that does not trust the provider", category: catIdentity,
			status: s403, exception: "AccessDenied"}, exchange(role, good)...),
	}
}

// eksAuthCases are AssumeRoleForPodIdentity requests (EKS Auth beside the
// façade, signing name eks-auth): a POST to
// /clusters/{name}/assume-role-for-pod-identity reaches EKS Auth, never
// the EKS façade, and is answered with EKS Auth's exceptions and statuses.
func (e *env) eksAuthCases() []hostileCase {
	const op = "eks-auth:AssumeRoleForPodIdentity"
	path := func(cluster string) string { return "/clusters/" + cluster + "/assume-role-for-pod-identity" }
	pod := e.token(claims{aud: "pods.eks.amazonaws.com", pod: true})
	body := func(tok string) string { return `{"token": "` + tok + `"}` }
	a := func(c hostileCase) hostileCase {
		c.op = op
		if c.method == "" {
			c.method = http.MethodPost
		}
		if c.path == "" {
			c.path = path(e.cluster)
		}
		if c.sign == nil {
			c.sign = signedAs("eks-auth", "", 0)
		}
		return c
	}
	huge := body(strings.Repeat("a", 2<<20))
	return []hostileCase{
		a(hostileCase{name: "AssumeRoleForPodIdentity signed for eks", category: catSignature, body: body(pod), sign: signedAs("eks", "", 0),
			status: s403, exception: ise}),
		a(hostileCase{name: "AssumeRoleForPodIdentity without any signature", category: catSignature, body: body(pod), sign: unsigned,
			status: s403, exception: mat}),
		a(hostileCase{name: "AssumeRoleForPodIdentity body swapped after signing", category: catSignature, body: body("a.b.c"),
			tamper: replaceBody(body(pod)), status: s403, exception: ise, message: msgMismatch}),
		a(hostileCase{name: "AssumeRoleForPodIdentity path changed after signing", category: catSignature, path: path("absent"), body: body(pod),
			tamper: func(r *http.Request) { r.URL.Path = path(e.cluster) }, status: s403, exception: ise}),
		a(hostileCase{name: "AssumeRoleForPodIdentity without a token", category: catARN, body: `{}`,
			status: s400, exception: ipe, member: "token"}),
		a(hostileCase{name: "AssumeRoleForPodIdentity cluster name with a dot", category: catARN, path: path("a.b"), body: body(pod),
			status: s400, exception: ipe, member: "clusterName"}),
		a(hostileCase{name: "AssumeRoleForPodIdentity cluster name of 101 characters", category: catARN, path: path(strings.Repeat("a", 101)),
			body: body(pod), status: s400, exception: ipe, member: "clusterName"}),
		a(hostileCase{name: "AssumeRoleForPodIdentity cluster name with a Cyrillic letter", category: catUnicode,
			path: path(escape(strings.Replace(e.cluster, "o", "\u043e", 1))), body: body(pod), status: s400, exception: ipe, member: "clusterName"}),
		a(hostileCase{name: "AssumeRoleForPodIdentity cluster name ..", category: catPath, path: path(".."), body: body(pod),
			status: s400, exception: ipe, member: "clusterName"}),
		a(hostileCase{name: "AssumeRoleForPodIdentity of a cluster that does not exist", category: catARN, path: path("absent"), body: body(pod),
			status: s404, exception: rnf, message: "absent"}),
		a(hostileCase{name: "AssumeRoleForPodIdentity body over the limit", category: catSize, bodyBytes: []byte(huge),
			status: s413, exception: tle}),
		a(hostileCase{name: "AssumeRoleForPodIdentity a token that is no JWT", category: catIdentity, body: body("not-a-jwt"),
			status: s400, exception: ite}),
		a(hostileCase{name: "AssumeRoleForPodIdentity token for STS's audience", category: catIdentity,
			body: body(e.token(claims{pod: true})), status: s400, exception: ite, message: "audience"}),
		a(hostileCase{name: "AssumeRoleForPodIdentity expired token", category: catIdentity,
			body: body(e.token(claims{aud: "pods.eks.amazonaws.com", pod: true, expiresIn: -time.Hour})), status: s400, exception: ete}),
		a(hostileCase{name: "AssumeRoleForPodIdentity token signed by another key", category: catIdentity,
			body: body(e.token(claims{aud: "pods.eks.amazonaws.com", pod: true, key: otherKey()})), status: s400, exception: ite}),
		a(hostileCase{name: "AssumeRoleForPodIdentity token of another issuer", category: catIdentity,
			body: body(e.token(claims{iss: e.elsewhere, aud: "pods.eks.amazonaws.com", pod: true})), status: s400, exception: ite}),
		a(hostileCase{name: "AssumeRoleForPodIdentity token bound to no pod", category: catIdentity,
			body: body(e.token(claims{aud: "pods.eks.amazonaws.com"})), status: s400, exception: ite, message: "not bound to a pod"}),
		a(hostileCase{name: "AssumeRoleForPodIdentity service account without an association", category: catIdentity,
			body: body(e.token(claims{aud: "pods.eks.amazonaws.com", pod: true, ns: "default", sa: "other"})), status: s404, exception: rnf}),
		// Not EKS Auth's method: the façade answers, as for any path it
		// does not serve.
		{name: "GET of assume-role-for-pod-identity is no EKS Auth call", category: catMethod, op: "", method: http.MethodGet,
			path: path(e.cluster), status: s404, exception: uoe},
		// The hosted issuers' documents are served only for an issuer
		// saltbush hosts; any other such path is the façade's.
		{name: "OIDC keys of an issuer saltbush does not host", category: catMethod, op: "", method: http.MethodGet,
			path: "/id/NOPE" + oidc.KeysPath, status: s404, exception: uoe},
	}
}
