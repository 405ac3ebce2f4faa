package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

const okAnswer = `{
  "subject": {"namespace": "ns-a", "serviceAccount": "sa1"},
  "audience": "pods.eks.amazonaws.com",
  "podIdentityAssociation": {"associationArn": "arn:aws:eks:us-east-1:111122223333:podidentityassociation/prod/a-abc", "associationId": "a-abc"},
  "assumedRoleUser": {"arn": "arn:aws:sts::111122223333:assumed-role/reader/eks-prod-sa1", "assumeRoleId": "AROAEXAMPLE:eks-prod-sa1"},
  "credentials": {"sessionToken": "token", "secretAccessKey": "secret", "accessKeyId": "ASIAEXAMPLE", "expiration": %s}
}`

func TestParseAnswer(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantExp time.Time
		wantErr string
	}{
		{"integral epoch seconds", fmt.Sprintf(okAnswer, "1702445428"), time.Unix(1702445428, 0), ""},
		{"fractional epoch seconds", fmt.Sprintf(okAnswer, "1702445428.25"), time.Unix(1702445428, 250e6), ""},
		{"expiration as a string", fmt.Sprintf(okAnswer, `"2023-12-13T05:30:28Z"`), time.Time{}, "invalid response from server"},
		{"no credentials", `{"assumedRoleUser": {"arn": "arn:aws:sts::111122223333:assumed-role/r/s"}}`, time.Time{},
			"credentials or assumed role empty"},
		{"no assumed role", `{"credentials": {"sessionToken": "t", "secretAccessKey": "s", "accessKeyId": "a", "expiration": 1}}`,
			time.Time{}, "credentials or assumed role empty"},
		{"not JSON", `<html>`, time.Time{}, "invalid response from server"},
		{"assumed role not an ARN", strings.Replace(fmt.Sprintf(okAnswer, "1"), "arn:aws:sts::111122223333:assumed-role/reader/eks-prod-sa1", "reader", 1),
			time.Time{}, "unable to parse arn"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAnswer(http.StatusOK, http.Header{}, []byte(tc.body))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Credentials{AccessKeyID: "ASIAEXAMPLE", SecretAccessKey: "secret", SessionToken: "token", AccountID: "111122223333",
				Expiration: tc.wantExp.UTC(), RoleArn: "arn:aws:sts::111122223333:assumed-role/reader/eks-prod-sa1", AssociationID: "a-abc"}
			if got != want {
				t.Fatalf("got %+v, want %+v", got, want)
			}
		})
	}
}

// TestErrorMapping holds each EKS Auth error answer (statuses as the
// botocore model eks-auth 2023-11-26 gives them) to what the agent
// answers the pod.
func TestErrorMapping(t *testing.T) {
	tests := []struct {
		name         string
		status       int
		header       map[string]string
		body         string
		wantStatus   int
		wantBody     string
		irrecoverble bool
	}{
		{"invalid token", 400, map[string]string{"X-Amzn-ErrorType": "InvalidTokenException", "X-Amzn-RequestId": "r1"},
			`{"message":"The token is not valid."}`, 400, "[r1]: (InvalidTokenException): The token is not valid., fault: client", true},
		{"expired token", 400, map[string]string{"X-Amzn-ErrorType": "ExpiredTokenException", "X-Amzn-RequestId": "r2"},
			`{"message":"expired"}`, 400, "[r2]: (ExpiredTokenException): expired, fault: client", true},
		{"no association", 404, map[string]string{"X-Amzn-ErrorType": "ResourceNotFoundException", "X-Amzn-RequestId": "r3"},
			`{"message":"No Pod Identity association"}`, 404, "[r3]: (ResourceNotFoundException): No Pod Identity association, fault: client", true},
		{"agent not allowed", 400, map[string]string{"X-Amzn-ErrorType": "AccessDeniedException", "X-Amzn-RequestId": "r4"},
			`{"message":"not authorized to perform: eks-auth:AssumeRoleForPodIdentity"}`, 400,
			"[r4]: (AccessDeniedException): not authorized to perform: eks-auth:AssumeRoleForPodIdentity, fault: client", true},
		{"invalid parameter", 400, map[string]string{"X-Amzn-ErrorType": "InvalidParameterException"}, `{"message":"bad"}`,
			400, "[]: (InvalidParameterException): bad, fault: client", false},
		{"invalid request", 400, map[string]string{"X-Amzn-ErrorType": "InvalidRequestException"}, `{"message":"bad"}`,
			400, "[]: (InvalidRequestException): bad, fault: client", false},
		{"throttled", 429, map[string]string{"X-Amzn-ErrorType": "ThrottlingException", "X-Amzn-RequestId": "r5"},
			`{"message":"Rate exceeded"}`, 429, "[r5]: (ThrottlingException): Rate exceeded, fault: client", false},
		{"internal error", 500, map[string]string{"X-Amzn-ErrorType": "InternalServerException"}, `{"message":"oops"}`,
			500, "[]: (InternalServerException): oops, fault: server", false},
		{"unavailable", 503, map[string]string{"X-Amzn-ErrorType": "ServiceUnavailableException"}, `{"message":"later"}`,
			503, "[]: (ServiceUnavailableException): later, fault: server", false},
		{"code with a header suffix", 404, map[string]string{"X-Amzn-ErrorType": "ResourceNotFoundException:http://internal.amazon.com/"},
			`{"message":"gone"}`, 404, "[]: (ResourceNotFoundException): gone, fault: client", true},
		{"code in the body with a namespace", 400, nil, `{"__type":"com.amazonaws.eksauth#InvalidTokenException","Message":"bad token"}`,
			400, "[]: (InvalidTokenException): bad token, fault: client", true},
		{"code in the body", 429, nil, `{"code":"ThrottlingException","message":"slow down"}`,
			429, "[]: (ThrottlingException): slow down, fault: client", false},
		{"no code", 502, nil, `not json`, 502, "[]: (UnknownError): Bad Gateway, fault: unknown", false},
		{"unmodeled code", 403, map[string]string{"X-Amzn-ErrorType": "UnrecognizedClientException"}, `{"message":"bad signature"}`,
			403, "[]: (UnrecognizedClientException): bad signature, fault: unknown", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			_, err := parseAnswer(tc.status, h, []byte(tc.body))
			var ae *apiError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v is not an EKS Auth error", err)
			}
			wrapped := fmt.Errorf("error getting credentials to cache: %w", err)
			body, status := errorAnswer(wrapped)
			if status != tc.wantStatus || body != tc.wantBody {
				t.Errorf("answer %d %q, want %d %q", status, body, tc.wantStatus, tc.wantBody)
			}
			if got := irrecoverable(wrapped); got != tc.irrecoverble {
				t.Errorf("irrecoverable = %v, want %v", got, tc.irrecoverble)
			}
		})
	}
}

func TestErrorAnswer_AgentFailures(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantBody   string
	}{
		{"empty token", validateToken("", time.Now()), 400, "Service account token cannot be empty"},
		{"wrong address", validateHost("10.0.0.1", []string{agentIPv4, agentIPv6}), 403,
			"Access Denied. Called agent through invalid address, please use either [169.254.170.23 fd00:ec2::23] address not 10.0.0.1"},
		{"no answer", fmt.Errorf("eks-auth AssumeRoleForPodIdentity: %w", errors.New("dial tcp: connection refused")), 500,
			"eks-auth AssumeRoleForPodIdentity: dial tcp: connection refused"},
		{"invalid answer", errors.New("invalid response from server: credentials or assumed role empty"), 500,
			"invalid response from server: credentials or assumed role empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, status := errorAnswer(tc.err)
			if status != tc.wantStatus || body != tc.wantBody {
				t.Errorf("answer %d %q, want %d %q", status, body, tc.wantStatus, tc.wantBody)
			}
		})
	}
}

func TestResolveEndpoint(t *testing.T) {
	tests := []struct {
		name    string
		flag    string
		region  string
		env     map[string]string
		want    string
		wantErr bool
	}{
		{"the flag wins", "https://flag.example:8443", "us-east-1",
			map[string]string{"AWS_ENDPOINT_URL_EKS_AUTH": "https://svc.example", "AWS_ENDPOINT_URL": "https://all.example"}, "https://flag.example:8443", false},
		{"the service's variable", "", "us-east-1",
			map[string]string{"AWS_ENDPOINT_URL_EKS_AUTH": "https://svc.example", "AWS_ENDPOINT_URL": "https://all.example"}, "https://svc.example", false},
		{"the global variable", "", "us-east-1", map[string]string{"AWS_ENDPOINT_URL": "https://all.example"}, "https://all.example", false},
		{"variables ignored", "", "us-east-1",
			map[string]string{"AWS_ENDPOINT_URL_EKS_AUTH": "https://svc.example", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"},
			"https://eks-auth.us-east-1.api.aws", false},
		{"the region's default", "", "eu-west-1", nil, "https://eks-auth.eu-west-1.api.aws", false},
		{"a China region", "", "cn-north-1", nil, "https://eks-auth.cn-north-1.api.amazonwebservices.com.cn", false},
		{"no region, no endpoint", "", "", nil, "", true},
		{"not a URL", "eks-auth.example", "us-east-1", nil, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveEndpoint(tc.flag, tc.region, func(k string) string { return tc.env[k] })
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("resolveEndpoint = %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestNewRequest checks the attempt's request: the operation's method and
// path under the endpoint, the JSON body, and a SigV4 signature for
// eks-auth in the agent's region with its session token.
func TestNewRequest(t *testing.T) {
	tests := []struct {
		name     string
		endpoint string
		cluster  string
		wantURL  string
	}{
		{"host only", "https://saltbush.example:8443", "prod", "https://saltbush.example:8443/clusters/prod/assume-role-for-pod-identity"},
		{"trailing slash", "https://saltbush.example/", "prod", "https://saltbush.example/clusters/prod/assume-role-for-pod-identity"},
		{"path prefix", "https://gw.example/eks-auth", "dev_1", "https://gw.example/eks-auth/clusters/dev_1/assume-role-for-pod-identity"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newEKSAuth(tc.endpoint, "us-east-1", nil)
			if err != nil {
				t.Fatal(err)
			}
			c.now = func() time.Time { return time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC) }
			creds := aws.Credentials{AccessKeyID: "ASIAAGENT", SecretAccessKey: "s", SessionToken: "agent-session"}
			req, err := c.newRequest(context.Background(), creds, tc.cluster, []byte(`{"token":"jwt"}`))
			if err != nil {
				t.Fatal(err)
			}
			if req.Method != http.MethodPost || req.URL.String() != tc.wantURL {
				t.Errorf("%s %s, want POST %s", req.Method, req.URL, tc.wantURL)
			}
			if got := req.Header.Get("Authorization"); !strings.HasPrefix(got,
				"AWS4-HMAC-SHA256 Credential=ASIAAGENT/20261206/us-east-1/eks-auth/aws4_request, SignedHeaders=") {
				t.Errorf("Authorization %q", got)
			}
			if req.Header.Get("X-Amz-Security-Token") != "agent-session" || req.Header.Get("X-Amz-Date") != "20261206T100000Z" ||
				req.Header.Get("Content-Type") != "application/json" {
				t.Errorf("headers %v", req.Header)
			}
			body, _ := io.ReadAll(req.Body)
			if string(body) != `{"token":"jwt"}` {
				t.Errorf("body %s", body)
			}
		})
	}
	if _, err := url.Parse(operationURL(&url.URL{Scheme: "https", Host: "h"}, "a/b")); err != nil {
		t.Fatal(err)
	}
}
