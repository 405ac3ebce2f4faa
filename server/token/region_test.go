package token

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestScopeRegionMustMatchSTSHost: a token's URL names an AWS STS
// host, and its credential scope a region. STS refuses a request signed
// for another region than the endpoint's ("SignatureDoesNotMatch:
// Credential should be scoped to a valid region"; the global host
// sts.amazonaws.com is us-east-1), so aws-iam-authenticator, which sends
// the URL to that host, refuses the token; so does Verify. Hosts added
// with --sts-host are not constrained.
func TestScopeRegionMustMatchSTSHost(t *testing.T) {
	v := verifierAt(signTime.Add(time.Minute))
	cases := []struct{ name, region, endpoint string }{
		{"us-east-1 scope on the eu-west-1 host", "us-east-1", "https://sts.eu-west-1.amazonaws.com"},
		{"eu-west-1 scope on the global host", "eu-west-1", "https://sts.amazonaws.com"},
		{"ap-south-1 scope on the fips us-east-2 host", "ap-south-1", "https://sts-fips.us-east-2.amazonaws.com"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tok := makeToken(t, gen{region: tc.region, endpoint: tc.endpoint})
			id, err := v.Verify(context.Background(), tok, testCluster)
			var te *Error
			if !errors.As(err, &te) {
				t.Errorf("Verify = %+v, %v; want a refusal (STS would not accept a %s signature at %s)", id, err, tc.region, tc.endpoint)
			}
		})
	}
}
