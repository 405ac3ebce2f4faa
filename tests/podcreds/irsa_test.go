package podcreds_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
)

// TestIRSA: a token the apiserver minted for a service account, with
// audience sts.amazonaws.com, is exchanged by the SDK's own web-identity
// provider for a session of the role that trusts the cluster's provider
// for that service account; the session is the role's. The hosted
// issuer's discovery document and keys are what a relying party reads.
func TestIRSA(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	w := newWorld(ctx, t, "irsa")

	status, body := w.hosted(t, "/.well-known/openid-configuration")
	var disc map[string]any
	if status != http.StatusOK || json.Unmarshal(body, &disc) != nil || disc["issuer"] != w.Issuer || disc["jwks_uri"] != w.Issuer+"/keys" {
		t.Fatalf("discovery document: %d %s", status, body)
	}

	roleARN := w.role(ctx, t, "app", w.irsaTrust("default", "app"))
	token := w.token(ctx, t, "default", "app", "sts.amazonaws.com", "")
	out, err := w.anonymousSTS().AssumeRoleWithWebIdentity(ctx, &sts.AssumeRoleWithWebIdentityInput{
		RoleArn: aws.String(roleARN), RoleSessionName: aws.String("app-session"), WebIdentityToken: aws.String(token),
	})
	if err != nil {
		t.Fatalf("AssumeRoleWithWebIdentity: %v", err)
	}
	wantARN := "arn:aws:sts::" + w.Account + ":assumed-role/app/app-session"
	if aws.ToString(out.SubjectFromWebIdentityToken) != "system:serviceaccount:default:app" || aws.ToString(out.Audience) != "sts.amazonaws.com" ||
		aws.ToString(out.Provider) != w.Issuer || aws.ToString(out.AssumedRoleUser.Arn) != wantARN ||
		!strings.HasSuffix(aws.ToString(out.AssumedRoleUser.AssumedRoleId), ":app-session") {
		t.Fatalf("answer: subject %q audience %q provider %q user %+v", aws.ToString(out.SubjectFromWebIdentityToken),
			aws.ToString(out.Audience), aws.ToString(out.Provider), out.AssumedRoleUser)
	}
	c := out.Credentials
	who, err := w.stsAs(aws.ToString(c.AccessKeyId), aws.ToString(c.SecretAccessKey), aws.ToString(c.SessionToken)).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil || aws.ToString(who.Arn) != wantARN {
		t.Fatalf("GetCallerIdentity with the session: %v %v", who, err)
	}

	// What a pod's SDK does with AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE.
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	provider := stscreds.NewWebIdentityRoleProvider(w.anonymousSTS(), roleARN, stscreds.IdentityTokenFile(file))
	client := eks.New(eks.Options{Region: w.Region, BaseEndpoint: aws.String(w.Server.URL), Credentials: aws.NewCredentialsCache(provider)})
	if _, err := client.ListClusters(ctx, &eks.ListClustersInput{}); err != nil {
		t.Fatalf("ListClusters with the web identity provider: %v", err)
	}
}

// TestIRSARefused: what the trust policy, the provider and the token do
// not allow is refused with STS's errors, and no session is issued.
func TestIRSARefused(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	w := newWorld(ctx, t, "irsa-refused")
	roleARN := w.role(ctx, t, "only-app", w.irsaTrust("default", "app"))
	other := w.token(ctx, t, "default", "other", "sts.amazonaws.com", "")
	podAudience := w.token(ctx, t, "default", "app", "pods.eks.amazonaws.com", "")
	good := w.token(ctx, t, "default", "app", "sts.amazonaws.com", "")
	parts := strings.Split(good, ".")
	tampered := parts[0] + "." + strings.Replace(parts[1], parts[1][len(parts[1])-4:], "AAAA", 1) + "." + parts[2]

	tests := []struct {
		name, role, token, code string
	}{
		{"another service account", roleARN, other, "AccessDenied"},
		{"another audience", roleARN, podAudience, "InvalidIdentityToken"},
		{"a tampered token", roleARN, tampered, "InvalidIdentityToken"},
		{"an unsigned token", roleARN, parts[0] + "." + parts[1] + ".", "InvalidIdentityToken"},
		{"not a token", roleARN, "not-a-token", "InvalidIdentityToken"},
		{"a role that does not exist", "arn:aws:iam::" + w.Account + ":role/nobody", good, "AccessDenied"},
		{"a role of an account without the provider", "arn:aws:iam::999999999999:role/app", good, "InvalidIdentityToken"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.anonymousSTS().AssumeRoleWithWebIdentity(ctx, &sts.AssumeRoleWithWebIdentityInput{
				RoleArn: aws.String(tc.role), RoleSessionName: aws.String("s1"), WebIdentityToken: aws.String(tc.token),
			})
			var ae smithy.APIError
			if !errors.As(err, &ae) || ae.ErrorCode() != tc.code {
				t.Fatalf("AssumeRoleWithWebIdentity: %v, want %s", err, tc.code)
			}
		})
	}
}
