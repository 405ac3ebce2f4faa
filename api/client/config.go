package client

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"
)

// DefaultCallTimeout is the deadline of a call whose context has none
// (Config.CallTimeout 0). It is the admin CLI's --timeout default: long
// enough for a write that waits out etcd contention, short enough that a
// call to a replica that stopped answering does not hang a service.
const DefaultCallTimeout = 10 * time.Second

// Config says where saltbush is and who the client is.
type Config struct {
	// Endpoints are the host:port addresses of saltbush's gRPC port, one
	// per replica. They are tried in this order: the client stays on the
	// first that answers and moves to the next when it fails.
	Endpoints []string

	// CertDir holds ca.crt, CertName.crt and CertName.key: what `saltbush
	// admin cert issue --service NAME --out-dir DIR` writes (NAME is the
	// service; an agent's files are agent-INSTANCE.*), and what `saltbush
	// serve` writes to DATA_DIR/pki for the name "admin".
	CertDir string
	// CertName is NAME in CertDir's NAME.crt and NAME.key.
	CertName string
	// CAFile, CertFile and KeyFile name the CA bundle, the client
	// certificate and its key one by one; each set one is used instead of
	// CertDir's file.
	CAFile, CertFile, KeyFile string

	// ServerName is the name the servers' certificates are verified
	// against. Empty: each endpoint's own host, so replicas on different
	// hosts each present a certificate for their own name.
	ServerName string

	// Account is the 12-digit account the EKS services (saltbush.eks.v1)
	// act for: the server honours it only when the service's policy allows
	// saltbush:ActForAccount on arn:aws:iam::ACCOUNT:root. Empty: the
	// client sends none, and EKS calls are refused (the control services
	// need no account).
	Account string

	// CallTimeout is the deadline of a call whose context has none; 0 is
	// DefaultCallTimeout. A context's own deadline is never extended or
	// shortened. Retries happen within the call's deadline.
	CallTimeout time.Duration
}

// files are the PEM files a Config names, resolved.
type files struct {
	ca, cert, key string
}

// validate checks c and resolves the files it names. It reads nothing:
// that is New's job, so a configuration can be checked where its files do
// not exist yet.
func (c Config) validate() (files, error) {
	if len(c.Endpoints) == 0 {
		return files{}, errors.New("client: no endpoints: give the host:port of at least one saltbush gRPC port")
	}
	seen := make(map[string]bool, len(c.Endpoints))
	for _, ep := range c.Endpoints {
		if err := validateEndpoint(ep); err != nil {
			return files{}, err
		}
		if seen[ep] {
			return files{}, fmt.Errorf("client: endpoint %q is listed twice", ep)
		}
		seen[ep] = true
	}
	if c.CertName != "" && (filepath.Base(c.CertName) != c.CertName || c.CertName == "." || c.CertName == "..") {
		return files{}, fmt.Errorf("client: CertName %q must be a file name without a directory", c.CertName)
	}
	f := files{ca: c.CAFile, cert: c.CertFile, key: c.KeyFile}
	if c.CertDir != "" {
		if f.ca == "" {
			f.ca = filepath.Join(c.CertDir, "ca.crt")
		}
		if c.CertName != "" {
			if f.cert == "" {
				f.cert = filepath.Join(c.CertDir, c.CertName+".crt")
			}
			if f.key == "" {
				f.key = filepath.Join(c.CertDir, c.CertName+".key")
			}
		}
	}
	if f.ca == "" {
		return files{}, errors.New("client: no CA bundle: set CertDir or CAFile")
	}
	// The gRPC port accepts only clients with a certificate of saltbush's
	// CA: without one every call would fail at the handshake.
	if f.cert == "" || f.key == "" {
		return files{}, errors.New("client: no client certificate: set CertDir and CertName, or CertFile and KeyFile")
	}
	if c.Account != "" && !isAccountID(c.Account) {
		return files{}, fmt.Errorf("client: Account %q must be 12 digits", c.Account)
	}
	if c.CallTimeout < 0 {
		return files{}, fmt.Errorf("client: CallTimeout %v is negative", c.CallTimeout)
	}
	return f, nil
}

// callTimeout is CallTimeout with its default.
func (c Config) callTimeout() time.Duration {
	if c.CallTimeout == 0 {
		return DefaultCallTimeout
	}
	return c.CallTimeout
}

// validateEndpoint checks one host:port. A URL is refused rather than
// guessed at: gRPC's port speaks neither http:// nor a path.
func validateEndpoint(ep string) error {
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return fmt.Errorf("client: endpoint %q is not host:port: %w", ep, err)
	}
	if host == "" {
		return fmt.Errorf("client: endpoint %q has no host", ep)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("client: endpoint %q: port %q is not 1-65535", ep, port)
	}
	return nil
}

// isAccountID reports whether s is an AWS account id: 12 digits. The
// server checks it too; checking here reports a typo at startup rather
// than on the first EKS call.
func isAccountID(s string) bool {
	if len(s) != 12 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
