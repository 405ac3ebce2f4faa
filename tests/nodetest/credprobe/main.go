// Command credprobe is the test node's AWS workload: a pod program that
// asks "who am I?" with the unmodified AWS SDK for Go v2, exactly as an
// application on EKS would. It has no endpoint, region or credential of its
// own: everything comes from the default configuration and its default
// credential chain, that is from the environment the pod identity webhook
// injects (IRSA: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE; EKS Pod
// Identity: AWS_CONTAINER_CREDENTIALS_FULL_URI and
// AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE; both: AWS_REGION and the
// AWS_ENDPOINT_URL_* overrides). A test that sees an identity here has
// proven the whole path, webhook to credentials to a signed call.
//
//	credprobe serve :8080   answer GET /whoami, loading the configuration afresh each time
//	credprobe whoami        one-shot: the same JSON on stdout, exit 1 on failure
//
// /whoami loads a new configuration (so a new credential chain and an
// empty credential cache) on every request: a test sees whether new
// credentials are issued, not what a cache kept. It retrieves the
// credentials, calls STS GetCallerIdentity, then EKS ListClusters, and
// answers 200 with
//
//	{"arn", "account", "userId", "clusters": [...], "source"}
//
// (source: the aws.Credentials.Source of the credentials the chain found,
// e.g. WebIdentityCredentials or CredentialsEndpointProvider), or 502 with
//
//	{"stage": "credentials"|"sts"|"eks", "code": <AWS error code, if any>, "error": <message>}
//
// The image carries the test CA bundle at /etc/ssl/certs/ca-certificates.crt,
// where Go's TLS looks (tests/nodetest/credentials.go), so the HTTPS façade
// is trusted as a public endpoint would be.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
)

// Deadlines of each step; the whole of /whoami is bounded by their sum.
// Generous: the SDK retries, and a busy test machine is slow.
const (
	configTimeout      = 5 * time.Second
	credentialsTimeout = 20 * time.Second
	callTimeout        = 15 * time.Second
	// maxClusterPages bounds ListClusters' pagination.
	maxClusterPages = 10
)

// Identity is /whoami's answer.
type Identity struct {
	Arn      string   `json:"arn"`
	Account  string   `json:"account"`
	UserID   string   `json:"userId"`
	Clusters []string `json:"clusters"`
	Source   string   `json:"source"`
}

// Failure is /whoami's answer when a step fails.
type Failure struct {
	Stage string `json:"stage"`
	Code  string `json:"code,omitempty"`
	Error string `json:"error"`
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: credprobe serve ADDR | whoami")
	}
	switch os.Args[1] {
	case "serve":
		if len(os.Args) < 3 {
			fail("usage: credprobe serve ADDR")
		}
		serve(os.Args[2])
	case "whoami":
		id, f := whoami(context.Background())
		enc := json.NewEncoder(os.Stdout)
		if f != nil {
			_ = enc.Encode(f)
			os.Exit(1)
		}
		_ = enc.Encode(id)
	default:
		fail("unknown command " + os.Args[1])
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}

// whoami runs the three steps with a fresh configuration.
func whoami(ctx context.Context) (*Identity, *Failure) {
	cctx, cancel := context.WithTimeout(ctx, configTimeout)
	cfg, err := config.LoadDefaultConfig(cctx)
	cancel()
	if err != nil {
		return nil, failure("credentials", fmt.Errorf("load configuration: %w", err))
	}

	cctx, cancel = context.WithTimeout(ctx, credentialsTimeout)
	creds, err := cfg.Credentials.Retrieve(cctx)
	cancel()
	if err != nil {
		return nil, failure("credentials", err)
	}

	cctx, cancel = context.WithTimeout(ctx, callTimeout)
	caller, err := sts.NewFromConfig(cfg).GetCallerIdentity(cctx, &sts.GetCallerIdentityInput{})
	cancel()
	if err != nil {
		return nil, failure("sts", err)
	}

	id := &Identity{
		Arn: aws.ToString(caller.Arn), Account: aws.ToString(caller.Account), UserID: aws.ToString(caller.UserId),
		Clusters: []string{}, Source: creds.Source,
	}
	cctx, cancel = context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pages := eks.NewListClustersPaginator(eks.NewFromConfig(cfg), &eks.ListClustersInput{})
	for n := 0; pages.HasMorePages() && n < maxClusterPages; n++ {
		page, err := pages.NextPage(cctx)
		if err != nil {
			return nil, failure("eks", err)
		}
		id.Clusters = append(id.Clusters, page.Clusters...)
	}
	return id, nil
}

// failure names the stage and, when the error carries one, the AWS error
// code (InvalidIdentityToken, AccessDenied, ...).
func failure(stage string, err error) *Failure {
	f := &Failure{Stage: stage, Error: err.Error()}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		f.Code = ae.ErrorCode()
	}
	return f
}

func serve(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /whoami", func(w http.ResponseWriter, r *http.Request) {
		id, f := whoami(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if f != nil {
			w.WriteHeader(http.StatusBadGateway)
			_ = json.NewEncoder(w).Encode(f)
			return
		}
		_ = json.NewEncoder(w).Encode(id)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout: configTimeout + credentialsTimeout + 2*callTimeout + 5*time.Second}
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fail(err.Error())
	}
}
