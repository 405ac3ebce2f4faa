// Package sts_test drives saltbush's query-protocol endpoint (STS and IAM's
// OIDC provider reads, server/sts) with real clients: the AWS SDK for Go v2
// (service/sts, service/iam), the AWS CLI v1 and botocore, against a real
// in-process saltbush with real SigV4.
package sts_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	ststypes "github.com/aws/aws-sdk-go-v2/service/sts/types"
	"github.com/aws/smithy-go"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/servertest"
	"github.com/saltbush/saltbush/tests/wanterr"
)

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// stsAs is an unmodified STS client of the façade signing as c.
func stsAs(srv *servertest.Server, c servertest.Creds) *sts.Client {
	return sts.New(sts.Options{
		Region:       srv.Config.Cluster.Region,
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		HTTPClient:   &http.Client{Timeout: 30 * time.Second},
	})
}

func TestGetCallerIdentityUser(t *testing.T) {
	srv := servertest.Start(t)
	ctx := ctxT(t)
	dev := srv.Dev(t)
	out, err := stsAs(srv, dev).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatalf("GetCallerIdentity: %v", err)
	}
	if got := aws.ToString(out.Arn); got != dev.PrincipalARN {
		t.Errorf("Arn = %q, want %q", got, dev.PrincipalARN)
	}
	if got := aws.ToString(out.Account); got != dev.AccountID {
		t.Errorf("Account = %q, want %q", got, dev.AccountID)
	}
	if got := aws.ToString(out.UserId); !strings.HasPrefix(got, "AIDA") || len(got) != 21 {
		t.Errorf("UserId = %q, want AIDA and 17 characters", got)
	}
}

const (
	account    = "000000000000"
	otherAcct  = "111111111111"
	aliceARN   = "arn:aws:iam::" + account + ":user/alice"
	bobARN     = "arn:aws:iam::" + account + ":user/bob"
	roleARN    = "arn:aws:iam::" + account + ":role/ci/deployer"
	roleName   = "deployer"
	outsideARN = "arn:aws:iam::" + otherAcct + ":user/mallory"
)

// world is a saltbush with a role ci/deployer that alice may assume (her
// policy and the role's trust policy both say so), whose own policy lets
// its sessions list and describe clusters and nothing else; bob has the
// policy but the trust policy does not name him; mallory is of another
// account with a policy allowing everything.
type world struct {
	srv                 *servertest.Server
	clock               *servertest.Clock
	alice, bob, mallory servertest.Creds
	assumeRolePolicy    string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	clk := &servertest.Clock{}
	srv := servertest.Start(t, servertest.WithConfig(func(c *server.Config) { c.Cluster.Now = clk.Now }))
	ctx := ctxT(t)
	w := &world{srv: srv, clock: clk}
	keys := srv.IAM()
	if _, err := keys.CreatePrincipal(ctx, roleARN); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.PutPolicy(ctx, account, "cluster-reader", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["eks:ListClusters","eks:DescribeCluster"],"Resource":"*"}]}`); err != nil {
		t.Fatal(err)
	}
	if err := keys.AttachPolicy(ctx, roleARN, "cluster-reader"); err != nil {
		t.Fatal(err)
	}
	trust := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["` + aliceARN + `","arn:aws:iam::222222222222:root"]},"Action":["sts:AssumeRole","sts:TagSession"]}]}`
	maxSession := 2 * time.Hour
	if _, err := keys.UpdateRole(ctx, roleARN, iam.RoleUpdate{TrustPolicy: &trust, MaxSessionDuration: &maxSession}); err != nil {
		t.Fatal(err)
	}
	w.assumeRolePolicy = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["sts:AssumeRole","sts:TagSession"],"Resource":"` + roleARN + `"}]}`
	w.alice = srv.NewUser(t, aliceARN, w.assumeRolePolicy)
	w.bob = srv.NewUser(t, bobARN, w.assumeRolePolicy)
	srv.NewAccount(t, otherAcct)
	w.mallory = srv.NewUser(t, outsideARN, iam.AdministratorAccess)
	return w
}

// assume assumes the role as c with the Go SDK's STS client.
func (w *world) assume(t *testing.T, c servertest.Creds, in *sts.AssumeRoleInput) (servertest.Creds, *sts.AssumeRoleOutput) {
	t.Helper()
	out, err := stsAs(w.srv, c).AssumeRole(ctxT(t), in)
	if err != nil {
		t.Fatalf("AssumeRole as %s: %v", c.PrincipalARN, err)
	}
	cr := out.Credentials
	return servertest.Creds{
		AccessKeyID: aws.ToString(cr.AccessKeyId), SecretAccessKey: aws.ToString(cr.SecretAccessKey),
		SessionToken: aws.ToString(cr.SessionToken), AccountID: account, PrincipalARN: aws.ToString(out.AssumedRoleUser.Arn),
	}, out
}

// queryError checks an STS or IAM error as the SDK reports it: its code
// and HTTP status.
func queryError(t *testing.T, err error, code string, httpStatus int) string {
	t.Helper()
	if err == nil {
		t.Fatalf("call succeeded, want %s", code)
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an API error, want %s", err, err, code)
	}
	if ae.ErrorCode() != code {
		t.Errorf("ErrorCode() = %q (message %q), want %q", ae.ErrorCode(), ae.ErrorMessage(), code)
	}
	var re *awshttp.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("error %v carries no HTTP response", err)
	}
	if re.HTTPStatusCode() != httpStatus {
		t.Errorf("HTTP status = %d, want %d for %s", re.HTTPStatusCode(), httpStatus, code)
	}
	return ae.ErrorMessage()
}

func TestAssumeRoleSession(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	before := w.clock.Now()
	sess, out := w.assume(t, w.alice, &sts.AssumeRoleInput{
		RoleArn: aws.String(roleARN), RoleSessionName: aws.String("ci-run@42"), DurationSeconds: aws.Int32(1800),
		Tags: []ststypes.Tag{{Key: aws.String("team"), Value: aws.String("platform")}},
	})
	wantARN := "arn:aws:sts::" + account + ":assumed-role/" + roleName + "/ci-run@42"
	if sess.PrincipalARN != wantARN {
		t.Errorf("AssumedRoleUser.Arn = %q, want %q", sess.PrincipalARN, wantARN)
	}
	if id := aws.ToString(out.AssumedRoleUser.AssumedRoleId); !strings.HasPrefix(id, "AROA") || !strings.HasSuffix(id, ":ci-run@42") {
		t.Errorf("AssumedRoleId = %q, want AROA…:ci-run@42", id)
	}
	if !strings.HasPrefix(sess.AccessKeyID, "ASIA") || len(sess.AccessKeyID) != 20 || sess.SessionToken == "" {
		t.Errorf("credentials %q / token %d bytes, want an ASIA key id and a token", sess.AccessKeyID, len(sess.SessionToken))
	}
	if exp := aws.ToTime(out.Credentials.Expiration); exp.Before(before.Add(1799*time.Second)) || exp.After(before.Add(1801*time.Second+time.Minute)) {
		t.Errorf("Expiration = %v, want about %v", exp, before.Add(1800*time.Second))
	}
	if out.PackedPolicySize == nil { //nolint:staticcheck // SA1019: botocore's sts model, which saltbush answers, still has PackedPolicySize
		t.Error("PackedPolicySize absent for a call with session tags")
	}

	id, err := stsAs(w.srv, sess).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatalf("GetCallerIdentity as the session: %v", err)
	}
	if aws.ToString(id.Arn) != wantARN || aws.ToString(id.Account) != account ||
		aws.ToString(id.UserId) != aws.ToString(out.AssumedRoleUser.AssumedRoleId) {
		t.Errorf("GetCallerIdentity = %s %s %s, want %s %s %s", aws.ToString(id.Arn), aws.ToString(id.Account), aws.ToString(id.UserId),
			wantARN, account, aws.ToString(out.AssumedRoleUser.AssumedRoleId))
	}

	// The session acts with its role's policies.
	eksSess := w.srv.EKSAs(t, sess)
	if _, err := eksSess.ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters as the session: %v", err)
	}
	_, err = eksSess.DeleteCluster(ctx, &eks.DeleteClusterInput{Name: aws.String("prod")})
	wanterr.AWS(t, err, errdefs.AccessDeniedException, http.StatusForbidden)
	wanterr.Contains(t, err, "User: "+wantARN+" is not authorized to perform: eks:DeleteCluster")

	// A session token that does not belong to the key, or no token at all,
	// is refused.
	wrong := sess
	wrong.SessionToken = otherSessionToken(sess.SessionToken)
	_, err = w.srv.EKSAs(t, wrong).ListClusters(ctx, &eks.ListClustersInput{})
	wanterr.AWS(t, err, errdefs.UnrecognizedClientException, http.StatusForbidden)
	none := sess
	none.SessionToken = ""
	_, err = stsAs(w.srv, none).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	queryError(t, err, "InvalidClientTokenId", http.StatusForbidden)
}

func TestAssumeRoleRefused(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	sess, _ := w.assume(t, w.alice, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("first")})
	tests := []struct {
		name   string
		as     servertest.Creds
		in     *sts.AssumeRoleInput
		code   string
		status int
		says   string
	}{
		{"caller's policy does not allow it", w.srv.NewUser(t, "arn:aws:iam::"+account+":user/carol", ""),
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("s1")},
			"AccessDenied", http.StatusForbidden, "because no identity-based policy allows the sts:AssumeRole action"},
		{"trust policy does not name the caller", w.bob,
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("s1")},
			"AccessDenied", http.StatusForbidden, "User: " + bobARN + " is not authorized to perform: sts:AssumeRole on resource: " + roleARN},
		{"another account the trust policy does not name", w.mallory,
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("s1")},
			"AccessDenied", http.StatusForbidden, "User: " + outsideARN + " is not authorized to perform: sts:AssumeRole on resource: " + roleARN},
		{"a role that does not exist", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String("arn:aws:iam::" + account + ":role/ci/absent"), RoleSessionName: aws.String("s1")},
			"AccessDenied", http.StatusForbidden, "is not authorized to perform: sts:AssumeRole"},
		{"a role ARN without the role's path", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String("arn:aws:iam::" + account + ":role/" + roleName), RoleSessionName: aws.String("s1")},
			"AccessDenied", http.StatusForbidden, "is not authorized to perform: sts:AssumeRole"},
		{"account root", w.srv.NewKey(t, "arn:aws:iam::"+account+":root"),
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("s1")},
			"AccessDenied", http.StatusForbidden, "Roles may not be assumed by root accounts."},
		{"longer than the role's maximum", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("s1"), DurationSeconds: aws.Int32(7201)},
			"ValidationError", http.StatusBadRequest, "The requested DurationSeconds exceeds the MaxSessionDuration set for this role."},
		{"shorter than 900 seconds", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("s1"), DurationSeconds: aws.Int32(899)},
			"ValidationError", http.StatusBadRequest, "Value '899' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900"},
		{"longer than 43200 seconds", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("s1"), DurationSeconds: aws.Int32(43201)},
			"ValidationError", http.StatusBadRequest, "Member must have value less than or equal to 43200"},
		{"a session whose role may not assume roles", sess,
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("s1"), DurationSeconds: aws.Int32(3601)},
			"AccessDenied", http.StatusForbidden, "is not authorized to perform: sts:AssumeRole"},
		{"session name too short", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("a")},
			"ValidationError", http.StatusBadRequest, "1 validation error detected: Value 'a' at 'roleSessionName' failed to satisfy constraint: Member must have length greater than or equal to 2"},
		{"session name with a space", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("bad name")},
			"ValidationError", http.StatusBadRequest, `Value 'bad name' at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\w+=,.@-]*`},
		{"session name of 65 characters", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String(strings.Repeat("s", 65))},
			"ValidationError", http.StatusBadRequest, "Member must have length less than or equal to 64"},
		{"role ARN too short", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String("arn:aws:iam::1"), RoleSessionName: aws.String("s1")},
			"ValidationError", http.StatusBadRequest, "Value 'arn:aws:iam::1' at 'roleArn' failed to satisfy constraint: Member must have length greater than or equal to 20"},
		{"two violations at once", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String("arn:aws:iam::1"), RoleSessionName: aws.String("a")},
			"ValidationError", http.StatusBadRequest, "2 validation errors detected: "},
		{"a managed session policy", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("s1"), PolicyArns: []ststypes.PolicyDescriptorType{{Arn: aws.String("arn:aws:iam::aws:policy/ReadOnlyAccess")}}},
			"ValidationError", http.StatusBadRequest, "Managed session policies (PolicyArns) are not supported"},
		{"a malformed session policy", w.alice,
			&sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("s1"), Policy: aws.String(`{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*","Condition":{}}]}`)},
			"MalformedPolicyDocument", http.StatusBadRequest, "not a policy document saltbush evaluates"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := stsAs(w.srv, tc.as).AssumeRole(ctx, tc.in)
			if msg := queryError(t, err, tc.code, tc.status); !strings.Contains(msg, tc.says) {
				t.Errorf("message %q does not say %q", msg, tc.says)
			}
		})
	}
}

// TestAssumeRoleCrossAccount: a principal of another account assumes the
// role when the role's trust policy names its account and its own policy
// allows sts:AssumeRole on the role; the session belongs to the role's
// account and has the role's permissions there.
func TestAssumeRoleCrossAccount(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	const trusted = "222222222222"
	w.srv.NewAccount(t, trusted)
	erin := w.srv.NewUser(t, "arn:aws:iam::"+trusted+":user/erin", w.assumeRolePolicy)
	noPolicy := w.srv.NewUser(t, "arn:aws:iam::"+trusted+":user/frank", "")

	sess, _ := w.assume(t, erin, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("from-222")})
	id, err := stsAs(w.srv, sess).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatalf("GetCallerIdentity as the cross-account session: %v", err)
	}
	if aws.ToString(id.Account) != account || aws.ToString(id.Arn) != "arn:aws:sts::"+account+":assumed-role/"+roleName+"/from-222" {
		t.Errorf("GetCallerIdentity = %s %s, want the role's account %s", aws.ToString(id.Account), aws.ToString(id.Arn), account)
	}
	if _, err := w.srv.EKSAs(t, sess).ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters in the role's account: %v", err)
	}
	// The trust policy names the account, so its principals' own policies
	// must allow the call too.
	_, err = stsAs(w.srv, noPolicy).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("from-222")})
	queryError(t, err, "AccessDenied", http.StatusForbidden)
}

// otherSessionToken is tok with its first character changed: a token of
// the same form that is not the session's. (Setting it to a fixed
// character made the same token once in 64 runs: the tokens are random
// base64.)
func otherSessionToken(tok string) string {
	c := "x"
	if strings.HasPrefix(tok, c) {
		c = "y"
	}
	return c + tok[1:]
}
