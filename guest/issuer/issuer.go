// Package issuer reads what the cluster's Kubernetes API says about the
// service-account tokens it issues: its issuer (the "issuer" of its
// discovery document, /.well-known/openid-configuration) and the public
// keys that verify them (/openid/v1/jwks). The executor sends both to
// saltbush, which hosts the cluster's OIDC issuer with them and verifies
// the cluster's tokens (docs/agent.md, "Service-account keys").
package issuer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
)

// maxBytes bounds what is read from the apiserver (saltbush refuses a
// larger key set anyway).
const maxBytes = 64 << 10

// Keys is the apiserver's issuer and key set.
type Keys struct {
	Issuer string
	// JWKS is the key set as the apiserver serves it.
	JWKS []byte
}

// Digest identifies the issuer and keys together, to tell a change.
func (k Keys) Digest() string {
	h := sha256.New()
	h.Write([]byte(k.Issuer))
	h.Write([]byte{0})
	h.Write(k.JWKS)
	return hex.EncodeToString(h.Sum(nil))
}

// Read asks the apiserver, through c (a client of its root, such as the
// discovery client's RESTClient), for its issuer and keys.
func Read(ctx context.Context, c rest.Interface) (Keys, error) {
	disc, err := get(ctx, c, "/.well-known/openid-configuration")
	if err != nil {
		return Keys{}, err
	}
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(disc, &doc); err != nil {
		return Keys{}, fmt.Errorf("the apiserver's discovery document: %w", err)
	}
	if doc.Issuer == "" {
		return Keys{}, errors.New("the apiserver's discovery document names no issuer")
	}
	jwks, err := get(ctx, c, "/openid/v1/jwks")
	if err != nil {
		return Keys{}, err
	}
	return Keys{Issuer: doc.Issuer, JWKS: jwks}, nil
}

func get(ctx context.Context, c rest.Interface, path string) ([]byte, error) {
	body, err := c.Get().AbsPath(path).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET %s from the apiserver: %w", path, err)
	}
	if len(body) > maxBytes {
		return nil, fmt.Errorf("GET %s from the apiserver: %d bytes, more than %d", path, len(body), maxBytes)
	}
	return body, nil
}
