package sts_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBoto3 drives AssumeRole, GetCallerIdentity as the session and two
// refusals with boto3, a second real client beside the Go SDK.
func TestBoto3(t *testing.T) {
	if err := exec.Command("python3", "-c", "import boto3").Run(); err != nil {
		t.Skipf("python3 with boto3 is not installed (%v)", err)
	}
	w := newWorld(t)
	out := runCmd(t, "python3", keyEnv(w.alice), "boto3_sts.py", w.srv.URL, roleARN, "boto-run")
	var got struct {
		AssumedRoleArn, AssumedRoleID, AccessKeyID, Expiration string
		Identity                                               struct{ Arn, UserId, Account string }
		ShortNameError, IamError                               string
	}
	decode(t, out, &got)
	wantARN := "arn:aws:sts::" + account + ":assumed-role/" + roleName + "/boto-run"
	if got.AssumedRoleArn != wantARN || got.Identity.Arn != wantARN || got.Identity.Account != account {
		t.Errorf("boto3 saw %+v, want the session %s", got, wantARN)
	}
	if !strings.HasPrefix(got.AccessKeyID, "ASIA") || got.Identity.UserId != got.AssumedRoleID || !strings.HasSuffix(got.AssumedRoleID, ":boto-run") {
		t.Errorf("boto3 saw key %q, ids %q / %q", got.AccessKeyID, got.AssumedRoleID, got.Identity.UserId)
	}
	if got.ShortNameError != "ValidationError" {
		t.Errorf("a one-character session name: %q, want ValidationError", got.ShortNameError)
	}
	// The role's policy allows no IAM action.
	if got.IamError != "AccessDenied" {
		t.Errorf("ListOpenIDConnectProviders as the session: %q, want AccessDenied", got.IamError)
	}
}
