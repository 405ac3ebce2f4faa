package sts_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/servertest"
)

// TestAssumeRoleAudited: every AssumeRole, granted or refused, leaves one
// audit record naming the caller, the action and the role; reads
// (GetCallerIdentity) leave none.
func TestAssumeRoleAudited(t *testing.T) {
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	srv := servertest.Start(t, servertest.WithConfig(func(c *server.Config) { c.AuditLog = auditLog }))
	ctx := ctxT(t)
	keys := srv.IAM()
	if _, err := keys.CreatePrincipal(ctx, roleARN); err != nil {
		t.Fatal(err)
	}
	trust := `{"Statement":[{"Effect":"Allow","Principal":{"AWS":"` + aliceARN + `"},"Action":"sts:AssumeRole"}]}`
	if _, err := keys.UpdateRole(ctx, roleARN, iam.RoleUpdate{TrustPolicy: &trust}); err != nil {
		t.Fatal(err)
	}
	alice := srv.NewUser(t, aliceARN, `{"Statement":[{"Effect":"Allow","Action":"sts:AssumeRole","Resource":"`+roleARN+`"}]}`)
	bob := srv.NewUser(t, bobARN, "")
	if _, err := stsAs(srv, alice).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("audited")}); err != nil {
		t.Fatal(err)
	}
	if _, err := stsAs(srv, bob).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("audited")}); err == nil {
		t.Fatal("bob assumed the role")
	}
	if _, err := stsAs(srv, alice).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{}); err != nil {
		t.Fatal(err)
	}

	type record struct {
		Source, Operation, Principal, Account, Action, Resource, Outcome string
	}
	var got []record
	f, err := os.Open(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if r.Operation == "sts AssumeRole" || r.Operation == "sts GetCallerIdentity" {
			got = append(got, r)
		}
	}
	want := []record{
		{"facade", "sts AssumeRole", aliceARN, account, "sts:AssumeRole", roleARN, "Success"},
		{"facade", "sts AssumeRole", bobARN, account, "sts:AssumeRole", roleARN, "AccessDenied"},
	}
	if len(got) != len(want) {
		t.Fatalf("audit records %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("audit record %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
