package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// eksAuthSigningName is the EKS Auth API's SigV4 service name.
const eksAuthSigningName = "eks-auth"

// attemptTimeout bounds one HTTP attempt at AssumeRoleForPodIdentity; the
// caller's context bounds the retries.
const attemptTimeout = 5 * time.Second

// maxResponseBytes bounds what is read of an EKS Auth answer.
const maxResponseBytes = 1 << 20

// Credentials are what AssumeRoleForPodIdentity gave for one service
// account token.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	AccountID       string
	Expiration      time.Time
	// RoleArn and AssociationID are logged, not served.
	RoleArn       string
	AssociationID string
}

// apiError is an error answer of the EKS Auth API (REST-JSON): the HTTP
// status, the code from x-amzn-ErrorType (or the body), the message and the
// request ID.
type apiError struct {
	Status    int
	Code      string
	Message   string
	RequestID string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("eks-auth AssumeRoleForPodIdentity: https response error StatusCode: %d, RequestID: %s, %s: %s",
		e.Status, e.RequestID, e.Code, e.Message)
}

// ErrorCode and HTTPStatusCode are what the SDK's standard retryer reads to
// decide on a retry (throttling codes, 5xx statuses).
func (e *apiError) ErrorCode() string   { return e.Code }
func (e *apiError) HTTPStatusCode() int { return e.Status }

// fault is "client" or "server" for the API's modeled errors (the botocore
// model eks-auth 2023-11-26: InternalServerException and
// ServiceUnavailableException are the server's), "unknown" otherwise, as
// the SDK names a smithy.ErrorFault.
func (e *apiError) fault() string {
	switch e.Code {
	case "InternalServerException", "ServiceUnavailableException":
		return "server"
	case "AccessDeniedException", "ExpiredTokenException", "InvalidParameterException", "InvalidRequestException",
		"InvalidTokenException", "ResourceNotFoundException", "ThrottlingException":
		return "client"
	}
	return "unknown"
}

// irrecoverable reports whether err says the token or its association is
// gone for good, so that cached credentials for it must go too; other
// failures (throttling, server errors, the network) keep them.
func irrecoverable(err error) bool {
	var ae *apiError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case "ResourceNotFoundException", "ExpiredTokenException", "InvalidTokenException", "AccessDeniedException":
		return true
	}
	return false
}

// eksAuth calls AssumeRoleForPodIdentity, signed with SigV4 (signing name
// eks-auth) with the credentials of the agent's own default chain.
type eksAuth struct {
	endpoint *url.URL
	region   string
	creds    aws.CredentialsProvider
	signer   *v4.Signer
	client   *http.Client
	retryer  aws.Retryer
	now      func() time.Time
}

// defaultEndpoint is the EKS Auth endpoint of a region as the botocore
// model's endpoint rules give it (the partition's dual-stack suffix).
func defaultEndpoint(region string) string {
	suffix := "api.aws"
	if strings.HasPrefix(region, "cn-") {
		suffix = "api.amazonwebservices.com.cn"
	}
	return "https://eks-auth." + region + "." + suffix
}

// resolveEndpoint picks the EKS Auth endpoint as the SDK the real agent
// uses would: the --endpoint flag, else AWS_ENDPOINT_URL_EKS_AUTH, else
// AWS_ENDPOINT_URL (both ignored when AWS_IGNORE_CONFIGURED_ENDPOINT_URLS
// is true), else the region's default.
func resolveEndpoint(flag, region string, getenv func(string) string) (string, error) {
	e := flag
	if e == "" && !strings.EqualFold(getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"), "true") {
		e = getenv("AWS_ENDPOINT_URL_EKS_AUTH")
		if e == "" {
			e = getenv("AWS_ENDPOINT_URL")
		}
	}
	if e == "" {
		if region == "" {
			return "", errors.New("no region: set AWS_REGION, or give the endpoint")
		}
		e = defaultEndpoint(region)
	}
	u, err := url.Parse(e)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("endpoint %q is not an http(s) URL", e)
	}
	return u.String(), nil
}

func newEKSAuth(endpoint, region string, creds aws.CredentialsProvider) (*eksAuth, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	return &eksAuth{
		endpoint: u, region: region, creds: creds, signer: v4.NewSigner(),
		client: &http.Client{Timeout: attemptTimeout, Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, TLSHandshakeTimeout: attemptTimeout, MaxIdleConnsPerHost: 8,
		}},
		retryer: retry.NewStandard(),
		now:     time.Now,
	}, nil
}

// operationURL is POST /clusters/{clusterName}/assume-role-for-pod-identity
// under the endpoint (which may carry a path of its own).
func operationURL(endpoint *url.URL, cluster string) string {
	u := *endpoint
	u.RawPath = strings.TrimSuffix(endpoint.EscapedPath(), "/") + "/clusters/" + url.PathEscape(cluster) + "/assume-role-for-pod-identity"
	u.Path, _ = url.PathUnescape(u.RawPath)
	u.RawQuery, u.Fragment = "", ""
	return u.String()
}

// fetch calls AssumeRoleForPodIdentity for the token, retrying what the
// SDK's standard retryer retries (throttling, 5xx, connection errors).
func (c *eksAuth) fetch(ctx context.Context, cluster, token string) (Credentials, error) {
	if c.region == "" {
		return Credentials{}, errors.New("eks-auth AssumeRoleForPodIdentity: Invalid Configuration: Missing Region")
	}
	body, err := json.Marshal(map[string]string{"token": token})
	if err != nil {
		return Credentials{}, err
	}
	for attempt := 1; ; attempt++ {
		creds, err := c.attempt(ctx, cluster, body)
		if err == nil || attempt >= c.retryer.MaxAttempts() || !c.retryer.IsErrorRetryable(err) || ctx.Err() != nil {
			return creds, err
		}
		delay, derr := c.retryer.RetryDelay(attempt, err)
		if derr != nil {
			return creds, err
		}
		select {
		case <-ctx.Done():
			return creds, err
		case <-time.After(delay):
		}
	}
}

func (c *eksAuth) attempt(ctx context.Context, cluster string, body []byte) (Credentials, error) {
	creds, err := c.creds.Retrieve(ctx)
	if err != nil {
		return Credentials{}, fmt.Errorf("eks-auth AssumeRoleForPodIdentity: failed to retrieve the agent's credentials: %w", err)
	}
	req, err := c.newRequest(ctx, creds, cluster, body)
	if err != nil {
		return Credentials{}, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return Credentials{}, fmt.Errorf("eks-auth AssumeRoleForPodIdentity: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return Credentials{}, fmt.Errorf("eks-auth AssumeRoleForPodIdentity: read answer: %w", err)
	}
	return parseAnswer(resp.StatusCode, resp.Header, data)
}

// newRequest is the signed HTTP request of one attempt.
func (c *eksAuth) newRequest(ctx context.Context, creds aws.Credentials, cluster string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, operationURL(c.endpoint, cluster), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	sum := sha256.Sum256(body)
	if err := c.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), eksAuthSigningName, c.region, c.now()); err != nil {
		return nil, fmt.Errorf("eks-auth AssumeRoleForPodIdentity: sign: %w", err)
	}
	return req, nil
}

// answer is AssumeRoleForPodIdentity's REST-JSON output (the members the
// agent reads).
type answer struct {
	PodIdentityAssociation *struct {
		AssociationArn string `json:"associationArn"`
		AssociationID  string `json:"associationId"`
	} `json:"podIdentityAssociation"`
	AssumedRoleUser *struct {
		Arn          string `json:"arn"`
		AssumeRoleID string `json:"assumeRoleId"`
	} `json:"assumedRoleUser"`
	Credentials *struct {
		SessionToken    string       `json:"sessionToken"`
		SecretAccessKey string       `json:"secretAccessKey"`
		AccessKeyID     string       `json:"accessKeyId"`
		Expiration      *json.Number `json:"expiration"`
	} `json:"credentials"`
}

// parseAnswer turns an EKS Auth HTTP answer into credentials, or into an
// *apiError for a non-2xx one.
func parseAnswer(status int, h http.Header, body []byte) (Credentials, error) {
	if status < 200 || status > 299 {
		return Credentials{}, parseError(status, h, body)
	}
	var a answer
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&a); err != nil {
		return Credentials{}, fmt.Errorf("eks-auth AssumeRoleForPodIdentity: invalid response from server: %w", err)
	}
	if a.Credentials == nil || a.AssumedRoleUser == nil || a.Credentials.Expiration == nil ||
		a.Credentials.AccessKeyID == "" || a.Credentials.SecretAccessKey == "" || a.Credentials.SessionToken == "" {
		return Credentials{}, errors.New("invalid response from server: credentials or assumed role empty")
	}
	exp, err := epochSeconds(*a.Credentials.Expiration)
	if err != nil {
		return Credentials{}, fmt.Errorf("invalid response from server: expiration: %w", err)
	}
	parsed, err := arn.Parse(a.AssumedRoleUser.Arn)
	if err != nil {
		return Credentials{}, fmt.Errorf("unable to parse arn from assumed role: %v", err)
	}
	c := Credentials{
		AccessKeyID: a.Credentials.AccessKeyID, SecretAccessKey: a.Credentials.SecretAccessKey,
		SessionToken: a.Credentials.SessionToken, AccountID: parsed.AccountID, Expiration: exp,
		RoleArn: a.AssumedRoleUser.Arn,
	}
	if a.PodIdentityAssociation != nil {
		c.AssociationID = a.PodIdentityAssociation.AssociationID
	}
	return c, nil
}

// epochSeconds reads a REST-JSON timestamp: seconds since the epoch,
// possibly fractional.
func epochSeconds(n json.Number) (time.Time, error) {
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return time.Time{}, fmt.Errorf("%q is not epoch seconds", n.String())
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(math.Round(frac*1e3))*int64(time.Millisecond)).UTC(), nil
}

// parseError reads a REST-JSON error as the SDK does: the code from the
// x-amzn-ErrorType header, else the body's code or __type (namespace and
// any ":…" suffix dropped), the message from the body's message or Message.
func parseError(status int, h http.Header, body []byte) *apiError {
	e := &apiError{Status: status, RequestID: h.Get("X-Amzn-Requestid")}
	var b map[string]any
	_ = json.Unmarshal(body, &b)
	code := h.Get("X-Amzn-Errortype")
	for _, k := range []string{"code", "__type"} {
		if code != "" {
			break
		}
		code, _ = b[k].(string)
	}
	e.Code = sanitizeCode(code)
	for k, v := range b {
		if strings.EqualFold(k, "message") {
			e.Message, _ = v.(string)
		}
	}
	if e.Code == "" {
		e.Code = "UnknownError"
		if e.Message == "" {
			e.Message = http.StatusText(status)
		}
	}
	return e
}

func sanitizeCode(code string) string {
	if i := strings.Index(code, ":"); i >= 0 {
		code = code[:i]
	}
	if i := strings.LastIndex(code, "#"); i >= 0 {
		code = code[i+1:]
	}
	return strings.TrimSpace(code)
}
