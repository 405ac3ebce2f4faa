package sts

import (
	"context"
	"encoding/xml"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/oidc"
)

// roleAccount is the account of an IAM role ARN.
var roleAccount = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):role/`)

type assumeRoleWithWebIdentityResponse struct {
	XMLName  xml.Name                        `xml:"AssumeRoleWithWebIdentityResponse"`
	Xmlns    string                          `xml:"xmlns,attr"`
	Result   assumeRoleWithWebIdentityResult `xml:"AssumeRoleWithWebIdentityResult"`
	Metadata metadata                        `xml:"ResponseMetadata"`
}

type assumeRoleWithWebIdentityResult struct {
	Credentials                 credentialsXML     `xml:"Credentials"`
	SubjectFromWebIdentityToken string             `xml:"SubjectFromWebIdentityToken"`
	AssumedRoleUser             assumedRoleUserXML `xml:"AssumedRoleUser"`
	Provider                    string             `xml:"Provider"`
	Audience                    string             `xml:"Audience"`
	SourceIdentity              string             `xml:"SourceIdentity,omitempty"`
}

// webIdentityRequest is a checked AssumeRoleWithWebIdentity request.
type webIdentityRequest struct {
	roleARN, sessionName, token string
	duration                    time.Duration
	policy                      string
}

// assumeRoleWithWebIdentity exchanges a service-account token of a
// cluster saltbush hosts the issuer of for a role session, as STS does for
// an OIDC identity provider: the token must verify with the issuer's keys
// (kid, signature, iss, exp); the role's account must have an OIDC
// provider for the issuer whose client ids include one of the token's
// audiences; and the role's trust policy must trust that provider for
// sts:AssumeRoleWithWebIdentity under its conditions ({issuer}:sub,
// {issuer}:aud, {issuer}:amr). The request is unsigned: the token is the
// caller's proof.
func (h *Handler) assumeRoleWithWebIdentity(ctx context.Context, p params) (any, error) {
	in, err := parseWebIdentity(p)
	if err != nil {
		return nil, err
	}
	if h.cfg.Hosted == nil {
		return nil, idpCommunication()
	}
	iss, err := oidc.UnverifiedIssuer(in.token)
	if err != nil {
		return nil, invalidToken("%s", err)
	}
	account := roleAccount.FindStringSubmatch(in.roleARN)[1]
	provider, ok, err := h.provider(ctx, account, iss)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, invalidToken("No OpenIDConnect provider found in your account for %s", iss)
	}
	hosted, err := h.cfg.Hosted.Get(ctx, iss)
	if errors.Is(err, oidc.ErrUnknownIssuer) {
		// The provider is registered, but saltbush holds no keys for its
		// issuer (not one of its clusters, or the cluster is gone).
		return nil, idpCommunication()
	}
	if err != nil {
		return nil, err
	}
	claims, err := oidc.Verify(in.token, hosted.Keys, oidc.Expect{Issuer: iss, Now: time.Now()})
	if err != nil {
		if oidc.FailureOf(err) == oidc.Expired {
			return nil, senderError(http.StatusBadRequest, "ExpiredTokenException", "%s", err)
		}
		return nil, invalidToken("%s", err)
	}
	audience := ""
	for _, aud := range claims.Audience {
		if slices.Contains(provider.ClientIDs, aud) {
			audience = aud
			break
		}
	}
	if audience == "" {
		return nil, invalidToken("Incorrect token audience")
	}
	if claims.Subject == "" {
		return nil, invalidToken("The token has no subject")
	}
	hostPath := strings.ToLower(strings.TrimPrefix(iss, "https://"))
	providerARN := provider.ARN(account)
	noteCaller(ctx, identity.Caller{AccountID: account, PrincipalARN: providerARN})
	sess, err := h.cfg.Keys.AssumeRole(ctx, iam.AssumeRoleInput{
		Federated: providerARN,
		Context: map[string][]string{
			hostPath + ":sub": {claims.Subject},
			hostPath + ":aud": {audience},
			// Kubernetes' service-account tokens are issued to an
			// authenticated workload.
			hostPath + ":amr": {"authenticated"},
		},
		RoleARN: in.roleARN, SessionName: in.sessionName, Duration: in.duration, SessionPolicy: in.policy,
	})
	if err != nil {
		return nil, err
	}
	signer, _ := access.ParseSigner(sess.ARN)
	return assumeRoleWithWebIdentityResponse{
		Xmlns: apiSTS.namespace,
		Result: assumeRoleWithWebIdentityResult{
			Credentials: credentialsXML{
				AccessKeyID: sess.AccessKeyID, SecretAccessKey: sess.SecretAccessKey, SessionToken: sess.SessionToken,
				Expiration: sess.Expiration.UTC().Format(time.RFC3339),
			},
			SubjectFromWebIdentityToken: claims.Subject,
			AssumedRoleUser:             assumedRoleUserXML{AssumedRoleID: signer.Principal.ID() + ":" + in.sessionName, Arn: sess.ARN},
			Provider:                    iss,
			Audience:                    audience,
		},
		Metadata: metadata{RequestID: requestID(ctx)},
	}, nil
}

// provider finds the account's OIDC provider for an issuer (IAM's
// providers: those created and those of the account's clusters).
func (h *Handler) provider(ctx context.Context, account, issuer string) (Issuer, bool, error) {
	issuers, err := h.cfg.Issuers(ctx, account)
	if err != nil {
		return Issuer{}, false, err
	}
	for _, is := range issuers {
		if is.URL == issuer {
			return is, true, nil
		}
	}
	return Issuer{}, false, nil
}

// parseWebIdentity checks AssumeRoleWithWebIdentity's members against the
// model (botocore sts/2011-06-15), naming every violation as AWS does.
func parseWebIdentity(p params) (webIdentityRequest, error) {
	var v violations
	var in webIdentityRequest
	roleARN, name := roleAndSession(p, &v)
	token, ok := p.get("WebIdentityToken")
	if !ok {
		v.add("Value null at 'webIdentityToken' failed to satisfy constraint: Member must not be null")
	} else {
		// The token is a credential: its value is never echoed.
		switch n := len([]rune(token)); {
		case n < 4:
			v.add("Value at 'webIdentityToken' failed to satisfy constraint: Member must have length greater than or equal to 4")
		case n > oidc.MaxTokenBytes:
			v.add("Value at 'webIdentityToken' failed to satisfy constraint: Member must have length less than or equal to %d", oidc.MaxTokenBytes)
		}
	}
	if pid, ok := p.get("ProviderId"); ok {
		v.length("providerId", pid, 4, 2048)
	}
	in.duration = durationSeconds(p, &v)
	if err := v.err(); err != nil {
		return in, err
	}
	if p.has("ProviderId") {
		// ProviderId names an OAuth 2.0 provider (its access tokens); an
		// OIDC token names its issuer itself.
		return in, senderError(http.StatusBadRequest, "ValidationError",
			"ProviderId is for OAuth 2.0 access tokens; only OpenID Connect ID tokens are accepted here.")
	}
	var err error
	if in.policy, err = sessionPolicy(p); err != nil {
		return in, err
	}
	if !roleAccount.MatchString(roleARN) {
		return in, senderError(http.StatusBadRequest, "ValidationError", "%s is not a valid role ARN.", clip(roleARN))
	}
	in.roleARN, in.sessionName, in.token = roleARN, name, token
	return in, nil
}

// durationSeconds reads DurationSeconds (900 to 43200); zero when absent.
func durationSeconds(p params, v *violations) time.Duration {
	ds, ok := p.get("DurationSeconds")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(ds)
	switch {
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(ds, "-"):
		// A whole number beyond 64 bits is beyond the model's bounds too.
		v.add("Value '%s' at 'durationSeconds' failed to satisfy constraint: Member must have value less than or equal to 43200", clip(ds))
	case errors.Is(err, strconv.ErrRange):
		v.add("Value '%s' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900", clip(ds))
	case err != nil:
		v.add("Value '%s' at 'durationSeconds' failed to satisfy constraint: Member must be an integer", clip(ds))
	case n < 900:
		v.add("Value '%d' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900", n)
	case n > 43200:
		v.add("Value '%d' at 'durationSeconds' failed to satisfy constraint: Member must have value less than or equal to 43200", n)
	default:
		return time.Duration(n) * time.Second
	}
	return 0
}

// invalidToken is STS's InvalidIdentityToken.
func invalidToken(format string, args ...any) error {
	return senderError(http.StatusBadRequest, "InvalidIdentityToken", format, args...)
}

// idpCommunication is STS's IDPCommunicationError: the issuer's keys
// cannot be had. saltbush verifies only the issuers it hosts (it fetches
// no keys from elsewhere).
func idpCommunication() error {
	return senderError(http.StatusBadRequest, "IDPCommunicationError",
		"Couldn't retrieve verification key from your identity provider, please reference AssumeRoleWithWebIdentity documentation for requirements")
}
