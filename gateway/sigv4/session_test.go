package sigv4

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

const (
	testSessionKey    = "ASIASALTBUSHTEST0001"
	testSessionSecret = "c2Vzc2lvbi1zZXNzaW9uLXNlc3Npb24tc2Vzc2lvbg"
	testSessionToken  = "dG9rZW4tdG9rZW4tdG9rZW4="
	expiredKey        = "ASIASALTBUSHEXPIRED1"
)

// sessionVerifier knows one long-term key (testLookup) and one session,
// plus a session that has expired.
func sessionVerifier() *Verifier {
	v := verifierAt(signTime)
	v.SessionLookup = func(_ context.Context, id, token string) (string, bool, error) {
		switch {
		case id == expiredKey && token == testSessionToken:
			return "", false, ExpiredTokenError()
		case id == testSessionKey && token == testSessionToken:
			return testSessionSecret, true, nil
		}
		return "", false, nil
	}
	return v
}

func TestSessionToken(t *testing.T) {
	session := aws.Credentials{AccessKeyID: testSessionKey, SecretAccessKey: testSessionSecret, SessionToken: testSessionToken}
	cases := []struct {
		name      string
		creds     aws.Credentials
		presign   bool
		mutate    func(r *http.Request)
		nilLookup bool
		exception string
	}{
		{name: "header form", creds: session},
		{name: "presigned form", creds: session, presign: true},
		{name: "wrong token", creds: aws.Credentials{AccessKeyID: testSessionKey, SecretAccessKey: testSessionSecret, SessionToken: "other"}, exception: UnrecognizedClient},
		{name: "session key without its token", creds: aws.Credentials{AccessKeyID: testSessionKey, SecretAccessKey: testSessionSecret}, exception: UnrecognizedClient},
		{name: "long-term key with a token", creds: aws.Credentials{AccessKeyID: testKey, SecretAccessKey: testSecret, SessionToken: testSessionToken}, exception: UnrecognizedClient},
		{name: "expired session", creds: aws.Credentials{AccessKeyID: expiredKey, SecretAccessKey: testSessionSecret, SessionToken: testSessionToken}, exception: ExpiredToken},
		{name: "no session lookup", creds: session, nilLookup: true, exception: UnrecognizedClient},
		{name: "token not signed", creds: session, mutate: func(r *http.Request) {
			// Re-sign without the token, then add it unsigned.
			r.Header.Del("Authorization")
			r.Header.Del("X-Amz-Security-Token")
			if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: testSessionKey, SecretAccessKey: testSessionSecret}, r,
				hashHex(nil), "eks", testRegion, signTime); err != nil {
				t.Fatal(err)
			}
			r.Header.Set("X-Amz-Security-Token", testSessionToken)
		}, exception: InvalidSignature},
		{name: "token in both places", creds: session, presign: true, mutate: func(r *http.Request) {
			r.Header.Set("X-Amz-Security-Token", testSessionToken)
		}, exception: InvalidSignature},
		{name: "token swapped after signing", creds: session, presign: true, mutate: func(r *http.Request) {
			q := r.URL.Query()
			q.Set("X-Amz-Security-Token", "other")
			r.URL.RawQuery = q.Encode()
		}, exception: UnrecognizedClient},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := newReq(t, addonGet)
			if tc.presign {
				req.URL.RawQuery = "X-Amz-Expires=300"
				u, _, err := v4.NewSigner().PresignHTTP(context.Background(), tc.creds, req, "UNSIGNED-PAYLOAD", "eks", testRegion, signTime)
				if err != nil {
					t.Fatal(err)
				}
				if req.URL, err = url.Parse(u); err != nil {
					t.Fatal(err)
				}
			} else {
				sign(t, req, "", "eks", tc.creds, signTime)
			}
			if tc.mutate != nil {
				tc.mutate(req)
			}
			v := sessionVerifier()
			if tc.nilLookup {
				v.SessionLookup = nil
			}
			sr, body := serverSide(t, req)
			res, err := v.Verify(context.Background(), sr, body)
			wantException(t, err, tc.exception)
			if tc.exception == "" && (res.AccessKeyID != testSessionKey || res.SessionToken != testSessionToken) {
				t.Errorf("Result = %+v, want the session's key and token", res)
			}
		})
	}
}
