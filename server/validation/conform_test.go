package validation_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/server/validation"
)

func TestConform(t *testing.T) {
	invalid := errdefs.InvalidParameter("Value 'bad name!' at 'name' failed to satisfy constraint").WithField("clusterName", "bad name!")
	tests := []struct {
		name, op string
		err      error
		// want is the exception answered, "" when err must pass unchanged.
		want string
	}{
		{"listed", "CreateCluster", invalid, ""},
		{"unlisted, the operation's validation exception instead", "DescribeCluster", invalid, "ClientException"},
		{"unlisted, InvalidRequestException instead", "DescribeAccessEntry", invalid, "InvalidRequestException"},
		{"no validation exception listed", "ListAccessPolicies", invalid, ""},
		{"not a refusal of values", "DescribeCluster", errdefs.NotFound("No cluster found for name: c."), ""},
		{"not an API error", "DescribeCluster", errors.New("etcd: down"), ""},
		{"an operation the model lacks", "Brand", invalid, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := validation.Conform(tc.op, tc.err)
			if tc.want == "" {
				if got != tc.err {
					t.Fatalf("Conform changed %v to %v", tc.err, got)
				}
				return
			}
			var e *errdefs.Error
			if !errors.As(got, &e) || e.Exception != tc.want || e.Message != invalid.Message || e.Fields["clusterName"] != "bad name!" {
				t.Fatalf("Conform: %#v, want %s with the same message and members", got, tc.want)
			}
			if errs, _ := validation.Errors(tc.op); !slices.Contains(errs, e.Exception) {
				t.Fatalf("%s is not among %s's errors %v", e.Exception, tc.op, errs)
			}
		})
	}
}
