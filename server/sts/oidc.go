package sts

import (
	"context"
	"crypto/sha1" //nolint:gosec // G505: IAM's OIDC thumbprint is SHA-1 by definition, not a security check here
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"encoding/xml"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	storagev1 "github.com/saltbush/saltbush/gen/saltbush/storage/v1"
	"github.com/saltbush/saltbush/server/identity"
	"github.com/saltbush/saltbush/store"
)

// iamOperations are IAM's OIDC provider operations.
var iamOperations = map[string]operation{
	"ListOpenIDConnectProviders": {run: (*Handler).listOpenIDConnectProviders},
	"GetOpenIDConnectProvider":   {run: (*Handler).getOpenIDConnectProvider},
}

// Issuer is one OIDC provider of an account, as IAM reports it.
type Issuer struct {
	// URL is the issuer, https://….
	URL string
	// CreateDate is when the first cluster with this issuer was created.
	CreateDate time.Time
	// Thumbprint is the hex SHA-1 of the issuer's CA certificate, when
	// the cluster's CA is known.
	Thumbprint string
}

// ARN is the provider's ARN: arn:aws:iam::{account}:oidc-provider/{URL
// without https://}.
func (i Issuer) ARN(account string) string {
	return "arn:aws:iam::" + account + ":oidc-provider/" + strings.TrimPrefix(i.URL, "https://")
}

// Issuers lists an account's OIDC providers.
type Issuers func(ctx context.Context, account string) ([]Issuer, error)

// ClusterIssuers answers from the account's clusters: every cluster whose
// provisioner reported a service-account issuer is an OIDC provider of its
// account (IAM's provider is what IRSA trusts; here the cluster itself is).
// Clusters sharing an issuer are one provider.
func ClusterIssuers(st *store.Store) Issuers {
	return func(ctx context.Context, account string) ([]Issuer, error) {
		byURL := map[string]Issuer{}
		token := ""
		for {
			page, err := st.List(ctx, store.ListOptions{
				Prefix: store.ClustersPrefix(account), Scope: "ListOpenIDConnectProviders/" + account, Token: token,
			})
			if err != nil {
				return nil, fmt.Errorf("list the clusters of %s: %w", account, err)
			}
			for _, kv := range page.Items {
				rec := &storagev1.ClusterRecord{}
				if err := store.Decode(kv.Value, rec); err != nil {
					return nil, fmt.Errorf("cluster %s of %s: %w", kv.Name, account, err)
				}
				u := rec.GetOidcIssuer()
				if u == "" {
					continue
				}
				iss := Issuer{URL: u, CreateDate: rec.GetCreatedAt().AsTime(), Thumbprint: thumbprint(rec.GetCertificateAuthorityData())}
				if prev, ok := byURL[u]; ok && !iss.CreateDate.Before(prev.CreateDate) {
					continue
				}
				byURL[u] = iss
			}
			if page.NextToken == "" {
				break
			}
			token = page.NextToken
		}
		out := make([]Issuer, 0, len(byURL))
		for _, iss := range byURL {
			out = append(out, iss)
		}
		slices.SortFunc(out, func(a, b Issuer) int { return strings.Compare(a.URL, b.URL) })
		return out, nil
	}
}

// thumbprint is the hex SHA-1 of the first certificate in a base64 PEM
// bundle (the cluster's certificateAuthority.data), "" when there is none.
func thumbprint(caData string) string {
	raw, err := base64.StdEncoding.DecodeString(caData)
	if err != nil {
		return ""
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "CERTIFICATE" {
		return ""
	}
	sum := sha1.Sum(block.Bytes) //nolint:gosec // G401: see the import
	return hex.EncodeToString(sum[:])
}

type listOIDCResponse struct {
	XMLName  xml.Name       `xml:"ListOpenIDConnectProvidersResponse"`
	Xmlns    string         `xml:"xmlns,attr"`
	Result   listOIDCResult `xml:"ListOpenIDConnectProvidersResult"`
	Metadata metadata       `xml:"ResponseMetadata"`
}

type listOIDCResult struct {
	Providers []providerEntry `xml:"OpenIDConnectProviderList>member"`
}

type providerEntry struct {
	Arn string `xml:"Arn"`
}

// listOpenIDConnectProviders lists the caller's account's providers.
func (h *Handler) listOpenIDConnectProviders(ctx context.Context, _ params) (any, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	if err := h.cfg.Authorizer.Authorize(ctx, "iam:ListOpenIDConnectProviders", "*"); err != nil {
		return nil, err
	}
	issuers, err := h.cfg.Issuers(ctx, who.AccountID)
	if err != nil {
		return nil, err
	}
	res := listOIDCResult{Providers: []providerEntry{}}
	for _, iss := range issuers {
		res.Providers = append(res.Providers, providerEntry{Arn: iss.ARN(who.AccountID)})
	}
	return listOIDCResponse{Xmlns: apiIAM.namespace, Result: res, Metadata: metadata{RequestID: requestID(ctx)}}, nil
}

type getOIDCResponse struct {
	XMLName  xml.Name      `xml:"GetOpenIDConnectProviderResponse"`
	Xmlns    string        `xml:"xmlns,attr"`
	Result   getOIDCResult `xml:"GetOpenIDConnectProviderResult"`
	Metadata metadata      `xml:"ResponseMetadata"`
}

type getOIDCResult struct {
	URL         string   `xml:"Url"`
	ClientIDs   []string `xml:"ClientIDList>member"`
	Thumbprints []string `xml:"ThumbprintList>member"`
	CreateDate  string   `xml:"CreateDate"`
	Tags        struct{} `xml:"Tags"`
}

// providerARN is arn:aws:iam::{account}:oidc-provider/{host and path}.
var providerARN = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):oidc-provider/(.+)$`)

// getOpenIDConnectProvider describes one provider of the caller's account.
// Its URL is stored without the scheme, as IAM returns it.
func (h *Handler) getOpenIDConnectProvider(ctx context.Context, p params) (any, error) {
	who, err := identity.AccountCaller(ctx)
	if err != nil {
		return nil, err
	}
	arn, ok := p.get("OpenIDConnectProviderArn")
	var v violations
	if !ok {
		v.add("Value null at 'openIDConnectProviderArn' failed to satisfy constraint: Member must not be null")
	} else {
		v.length("openIDConnectProviderArn", arn, 20, 2048)
	}
	if err := v.err(); err != nil {
		qe := err.(*queryError)
		qe.code = "InvalidInput"
		return nil, qe
	}
	m := providerARN.FindStringSubmatch(arn)
	if m == nil {
		return nil, senderError(http.StatusBadRequest, "InvalidInput", "ARN %s is not valid.", clip(arn))
	}
	if err := h.cfg.Authorizer.Authorize(ctx, "iam:GetOpenIDConnectProvider", arn); err != nil {
		return nil, err
	}
	notFound := senderError(http.StatusNotFound, "NoSuchEntity", "OpenIDConnect Provider not found for arn %s", arn)
	if m[1] != who.AccountID {
		return nil, notFound
	}
	issuers, err := h.cfg.Issuers(ctx, who.AccountID)
	if err != nil {
		return nil, err
	}
	for _, iss := range issuers {
		if iss.ARN(who.AccountID) != arn {
			continue
		}
		res := getOIDCResult{
			URL: strings.TrimPrefix(iss.URL, "https://"), ClientIDs: []string{"sts.amazonaws.com"},
			Thumbprints: []string{}, CreateDate: iss.CreateDate.UTC().Format(time.RFC3339),
		}
		if iss.Thumbprint != "" {
			res.Thumbprints = append(res.Thumbprints, iss.Thumbprint)
		}
		return getOIDCResponse{Xmlns: apiIAM.namespace, Result: res, Metadata: metadata{RequestID: requestID(ctx)}}, nil
	}
	return nil, notFound
}
