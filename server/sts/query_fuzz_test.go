package sts

import (
	"encoding/xml"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/saltbush/saltbush/server/policy"
)

// FuzzParseAssumeRole reads arbitrary query-protocol parameters, a query
// string and a form body, as the endpoint reads them (requestParams, then
// parseAssumeRole). It never panics; a form that does not parse is
// refused; a refusal is a ValidationError, 400, whose ErrorResponse
// document parses and whose message is UTF-8 when the parameters are; and
// what it accepts is within every bound of AssumeRole's model.
func FuzzParseAssumeRole(f *testing.F) {
	role := url.QueryEscape("arn:aws:iam::000000000000:role/r")
	for _, s := range []struct{ query, body string }{
		{"", "Action=AssumeRole&Version=2011-06-15&RoleArn=" + role + "&RoleSessionName=s1"},
		{"RoleSessionName=q", "RoleArn=" + role + "&RoleSessionName=b"},
		{"", "RoleArn=" + role + "&RoleSessionName=s1&DurationSeconds=900&SourceIdentity=me&ExternalId=ext-1"},
		{"", "RoleArn=" + role + "&RoleSessionName=s1&DurationSeconds=43201"},
		{"", "RoleArn=" + role + "&RoleSessionName=s1&DurationSeconds=-1"},
		{"", "RoleArn=" + role + "&RoleSessionName=s1&DurationSeconds=9999999999999999999"},
		{"", "RoleArn=" + role + "&RoleSessionName=s1&Tags.member.1.Key=a&Tags.member.1.Value=b&Tags.member.2.Key=A&Tags.member.2.Value=c"},
		{"", "RoleArn=" + role + "&RoleSessionName=s1&Tags.member.1.Key=a&Tags.member.3.Value=b"},
		{"", "RoleArn=" + role + "&RoleSessionName=s1&Tags.member.1.Value=b"},
		{"", "RoleArn=" + role + "&RoleSessionName=s1&Policy=%7B%7D"},
		{"", "RoleArn=" + role + "&RoleSessionName=s1&PolicyArns.member.1.arn=x"},
		{"", "0&Policy.000000&RoleArn=00000000000000000000&RoleSessionName=00"},
		{"", "RoleArn=short&RoleSessionName=a%20b"},
		{"", "RoleArn=" + strings.Repeat("%C3%A9", 40) + "&RoleSessionName=" + strings.Repeat("%C3%A9", 40)},
		{"", "RoleArn=" + role + "%00&RoleSessionName=s%0A1"},
		{"", "RoleArn=" + role + "&RoleSessionName=s1&SourceIdentity=&ExternalId=%FF%FE"},
		{"", "RoleArn=%zz"},
		{"RoleArn=%zz", "RoleSessionName=s1"},
		{"", "a;b=c"},
		{"", ""},
	} {
		f.Add(s.query, s.body)
	}
	f.Fuzz(func(t *testing.T, query, body string) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.URL.RawQuery = query
		form, perr := requestParams(r, []byte(body))
		q, qerr := url.ParseQuery(query)
		b, berr := url.ParseQuery(body)
		switch {
		case (qerr != nil || berr != nil) != (perr != nil):
			t.Fatalf("requestParams error %v, but the query's %v and the body's %v", perr, qerr, berr)
		case perr != nil:
			return // refused as MalformedQueryString before any action runs
		}
		for k, vs := range q {
			if _, inBody := b[k]; !inBody && strings.Join(form[k], "\x00") != strings.Join(vs, "\x00") {
				t.Fatalf("query parameter %q: %q, want %q", k, form[k], vs)
			}
		}
		for k, vs := range b {
			if strings.Join(form[k], "\x00") != strings.Join(vs, "\x00") {
				t.Fatalf("body parameter %q: %q, want the body's %q", k, form[k], vs)
			}
		}

		in, err := parseAssumeRole(params(form))
		if err != nil {
			var qe *queryError
			if !errors.As(err, &qe) || qe.status != http.StatusBadRequest || (qe.code != "ValidationError" && qe.code != "MalformedPolicyDocument") ||
				qe.message == "" {
				t.Fatalf("refused with %#v, want a ValidationError or MalformedPolicyDocument", err)
			}
			valid := true
			for k, vs := range form {
				valid = valid && utf8.ValidString(k) && utf8.ValidString(strings.Join(vs, ""))
			}
			if valid && !utf8.ValidString(qe.message) {
				t.Fatalf("the message of a UTF-8 request is not UTF-8: %q", qe.message)
			}
			rec := httptest.NewRecorder()
			writeError(rec, apiSTS, "rid", qe)
			var doc struct {
				XMLName xml.Name
				Error   struct{ Type, Code, Message string }
			}
			if err := xml.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.Error.Code != qe.code || doc.Error.Type != "Sender" ||
				rec.Code != qe.status {
				t.Fatalf("the error document %q (%v) does not say %s", rec.Body.String(), err, qe.code)
			}
			return
		}
		// Accepted: within the model's bounds.
		if n := utf8.RuneCountInString(in.RoleARN); n < 20 || n > 2048 || !arnChars.MatchString(in.RoleARN) {
			t.Fatalf("accepted role ARN %q", in.RoleARN)
		}
		if n := utf8.RuneCountInString(in.SessionName); n < 2 || n > 64 || !roleSessionNamePattern.MatchString(in.SessionName) {
			t.Fatalf("accepted session name %q", in.SessionName)
		}
		if d := in.Duration; d != 0 && (d < 900*time.Second || d > 43200*time.Second) {
			t.Fatalf("accepted duration %v", d)
		}
		if si := in.SourceIdentity; si != "" && (utf8.RuneCountInString(si) < 2 || !roleSessionNamePattern.MatchString(si)) {
			t.Fatalf("accepted source identity %q", si)
		}
		if len(in.Tags) > maxSessionTags {
			t.Fatalf("accepted %d tags", len(in.Tags))
		}
		seen := map[string]bool{}
		for _, tag := range in.Tags {
			k, v := tag.GetKey(), tag.GetValue()
			if n := utf8.RuneCountInString(k); n < 1 || n > 128 || !tagPattern.MatchString(k) || seen[strings.ToLower(k)] {
				t.Fatalf("accepted tag key %q (tags %v)", k, in.Tags)
			}
			if utf8.RuneCountInString(v) > 256 || !tagPattern.MatchString(v) {
				t.Fatalf("accepted tag value %q", v)
			}
			seen[strings.ToLower(k)] = true
		}
		// Managed session policies are refused; an inline one is kept as sent
		// and is a document saltbush evaluates. Policy.member.1 and the like are
		// not the Policy parameter, and are ignored as unknown parameters are.
		if params(form).has("PolicyArns") {
			t.Fatalf("accepted managed session policies: %v", form)
		}
		if doc, _ := params(form).get("Policy"); in.SessionPolicy != doc {
			t.Fatalf("session policy %q, but Policy was %q", in.SessionPolicy, doc)
		}
		if in.SessionPolicy != "" {
			if _, err := policy.Parse([]byte(in.SessionPolicy)); err != nil {
				t.Fatalf("accepted session policy %q that does not parse: %v", in.SessionPolicy, err)
			}
		}
	})
}
