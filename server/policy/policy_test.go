package policy

import (
	"strings"
	"testing"
)

func mustParse(t *testing.T, doc string) *Document {
	t.Helper()
	d, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse(%s): %v", doc, err)
	}
	return d
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		wantErr string
	}{
		{"one statement object", `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"eks:*","Resource":"*"}}`, ""},
		{"statement list, action list", `{"Version":"2012-10-17","Statement":[{"Sid":"a","Effect":"Deny","Action":["eks:Delete*","eks:UpdateAddon"],"Resource":["arn:aws:eks:*:111122223333:cluster/*"]}]}`, ""},
		{"no version is 2008-10-17", `{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}`, ""},
		{"bad version", `{"Version":"2020-01-01","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}`, "Version"},
		{"bad effect", `{"Statement":[{"Effect":"allow","Action":"*","Resource":"*"}]}`, "Effect"},
		{"no action", `{"Statement":[{"Effect":"Allow","Resource":"*"}]}`, "Action is required"},
		{"no resource", `{"Statement":[{"Effect":"Allow","Action":"*"}]}`, "Resource is required"},
		{"malformed action", `{"Statement":[{"Effect":"Allow","Action":"CreateAddon","Resource":"*"}]}`, "not service:action"},
		{"resource not an ARN", `{"Statement":[{"Effect":"Allow","Action":"*","Resource":"cluster/x"}]}`, "not an ARN"},
		{"NotAction is refused, not ignored", `{"Statement":[{"Effect":"Deny","NotAction":"eks:Describe*","Resource":"*"}]}`, "NotAction"},
		{"Condition is refused, not ignored", `{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*","Condition":{}}]}`, "Condition"},
		{"Principal is refused", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"*","Resource":"*"}]}`, "Principal"},
		{"no statements", `{"Statement":[]}`, "at least one"},
		{"action of the wrong type", `{"Statement":[{"Effect":"Allow","Action":5,"Resource":"*"}]}`, "string or a list"},
		{"trailing data", `{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]} {}`, "trailing"},
		{"too large", `{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*","Sid":"` + strings.Repeat("x", MaxDocumentBytes) + `"}]}`, "exceeds"},
		{"not JSON", `Effect: Allow`, "policy document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Parse = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestEvaluate(t *testing.T) {
	const (
		clusterA = "arn:aws:eks:us-east-1:111122223333:cluster/prod"
		addonA   = "arn:aws:eks:us-east-1:111122223333:addon/prod/coredns/0b9e7c1d-3f4a-4e2b-8c6d-5a1f2e3d4c5b"
		clusterB = "arn:aws:eks:us-east-1:444455556666:cluster/prod"
	)
	readOnly := mustParse(t, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["eks:Describe*","eks:List*"],"Resource":"*"}]}`)
	admin := mustParse(t, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:*","Resource":"arn:aws:eks:*:111122223333:*"}]}`)
	noDelete := mustParse(t, `{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"eks:Delete*","Resource":"arn:aws:eks:us-east-1:111122223333:cluster/prod"}]}`)
	addonsOfProd := mustParse(t, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:*Addon","Resource":"arn:aws:eks:us-east-1:111122223333:addon/prod/*"}]}`)
	oneChar := mustParse(t, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:DescribeCluster","Resource":"arn:aws:eks:us-east-1:111122223333:cluster/pro?"}]}`)

	tests := []struct {
		name     string
		docs     []*Document
		action   string
		resource string
		want     Decision
	}{
		{"no policies deny", nil, "eks:DescribeCluster", clusterA, ImplicitDeny},
		{"prefix wildcard allows", []*Document{readOnly}, "eks:DescribeCluster", clusterA, Allowed},
		{"prefix wildcard does not allow others", []*Document{readOnly}, "eks:DeleteCluster", clusterA, ImplicitDeny},
		{"actions match case-insensitively", []*Document{readOnly}, "EKS:describecluster", clusterA, Allowed},
		{"account in the resource ARN limits the grant", []*Document{admin}, "eks:DeleteCluster", clusterB, ImplicitDeny},
		{"service wildcard allows in the account", []*Document{admin}, "eks:DeleteCluster", clusterA, Allowed},
		{"explicit deny wins over allow", []*Document{admin, noDelete}, "eks:DeleteCluster", clusterA, ExplicitDeny},
		{"deny is for its resource only", []*Document{admin, noDelete}, "eks:DeleteAddon", addonA, Allowed},
		{"suffix wildcard on actions", []*Document{addonsOfProd}, "eks:UpdateAddon", addonA, Allowed},
		{"resource wildcard covers the path", []*Document{addonsOfProd}, "eks:CreateAddon", "arn:aws:eks:us-east-1:111122223333:addon/prod/x/y", Allowed},
		{"resources match case-sensitively", []*Document{addonsOfProd}, "eks:CreateAddon", "arn:aws:eks:us-east-1:111122223333:addon/PROD/x/y", ImplicitDeny},
		{"question mark is one character", []*Document{oneChar}, "eks:DescribeCluster", "arn:aws:eks:us-east-1:111122223333:cluster/prod", Allowed},
		{"question mark is not two", []*Document{oneChar}, "eks:DescribeCluster", "arn:aws:eks:us-east-1:111122223333:cluster/prodx", ImplicitDeny},
		{"other services are not eks", []*Document{admin}, "iam:PassRole", "arn:aws:iam::111122223333:role/x", ImplicitDeny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Evaluate(tt.docs, tt.action, tt.resource); got != tt.want {
				t.Fatalf("Evaluate(%s, %s) = %s, want %s", tt.action, tt.resource, got, tt.want)
			}
		})
	}
}

func TestWildcardMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything/at:all", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbbd", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*a*a*a*a*a*b", strings.Repeat("a", 200), false},
		{"ünï?ode*", "ünïcode-x", true},
		{"", "", true},
		{"", "x", false},
	}
	for _, tt := range tests {
		if got := wildcardMatch(tt.pattern, tt.s); got != tt.want {
			t.Errorf("wildcardMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"eks:*","Resource":"*"}]}`))
	f.Add([]byte(`{"Statement":{"Effect":"Deny","Action":["a:b"],"Resource":["arn:x"]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := Parse(raw)
		if err != nil {
			return
		}
		// Whatever parses evaluates without panicking.
		_ = Evaluate([]*Document{d}, "eks:DescribeCluster", "arn:aws:eks:us-east-1:111122223333:cluster/x")
	})
}
