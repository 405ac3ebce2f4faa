package servertest

import (
	"context"
	"encoding/base64"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TokenOptions vary a token from what `aws eks get-token` makes.
type TokenOptions struct {
	// Region of the STS endpoint and signature; us-east-1 when empty.
	Region string
	// Endpoint overrides the STS endpoint (another host).
	Endpoint string
	// At signs at this time instead of now.
	At time.Time
}

// Token makes a bearer token the way `aws eks get-token` does: the real
// aws-sdk-go-v2 STS client presigns GetCallerIdentity with the
// x-k8s-aws-id header set to cluster and X-Amz-Expires=60, and the URL is
// wrapped as `k8s-aws-v1.` + unpadded base64url.
func Token(tb testing.TB, c Creds, cluster string, o TokenOptions) string {
	tb.Helper()
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	opts := sts.Options{Region: o.Region, Credentials: credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)}
	if o.Endpoint != "" {
		opts.BaseEndpoint = aws.String(o.Endpoint)
	}
	req, err := sts.NewPresignClient(sts.New(opts)).PresignGetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{},
		func(po *sts.PresignOptions) {
			if !o.At.IsZero() {
				po.Presigner = signAt{signer: v4.NewSigner(), at: o.At}
			}
			po.ClientOptions = append(po.ClientOptions, func(so *sts.Options) {
				so.APIOptions = append(so.APIOptions,
					smithyhttp.AddHeaderValue("x-k8s-aws-id", cluster),
					func(stack *middleware.Stack) error {
						return stack.Build.Add(middleware.BuildMiddlewareFunc("saltbushTokenExpires",
							func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
								if r, ok := in.Request.(*smithyhttp.Request); ok {
									q := r.URL.Query()
									q.Set("X-Amz-Expires", "60")
									r.URL.RawQuery = q.Encode()
								}
								return next.HandleBuild(ctx, in)
							}), middleware.After)
					})
			})
		})
	if err != nil {
		tb.Fatalf("presign GetCallerIdentity: %v", err)
	}
	return "k8s-aws-v1." + base64.RawURLEncoding.EncodeToString([]byte(req.URL))
}

// signAt is the SDK's own presigner with a fixed signing time.
type signAt struct {
	signer *v4.Signer
	at     time.Time
}

func (s signAt) PresignHTTP(ctx context.Context, cr aws.Credentials, r *http.Request, payloadHash, service, region string, _ time.Time, optFns ...func(*v4.SignerOptions)) (string, http.Header, error) {
	return s.signer.PresignHTTP(ctx, cr, r, payloadHash, service, region, s.at, optFns...)
}
