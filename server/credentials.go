package server

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/pki"
)

// AdminService is the service identity of the admin CLI's certificate.
const AdminService = "admin"

// DevUserName is the development account's administrator user.
const DevUserName = "saltbush-dev"

// masterKey returns the configured master key, or for an embedded etcd the
// one kept beside its data (generated on the first start).
func (c Config) masterKey() ([]byte, error) {
	if c.MasterKey != nil {
		return c.MasterKey, nil
	}
	if c.MasterKeyFile != "" {
		b, err := os.ReadFile(c.MasterKeyFile)
		if err != nil {
			return nil, fmt.Errorf("master key: %w", err)
		}
		return iam.ParseMasterKey(strings.TrimSpace(string(b)))
	}
	path := filepath.Join(c.DataDir, "master.key")
	b, err := os.ReadFile(path) //nolint:gosec // G304: master.key in the data directory from saltbush's own configuration
	if err == nil {
		return iam.ParseMasterKey(strings.TrimSpace(string(b)))
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("master key: %w", err)
	}
	key := make([]byte, iam.MasterKeySize)
	_, _ = rand.Read(key)
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	// O_EXCL: two processes on one data dir never write different keys.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600) //nolint:gosec // G304: master.key in the data directory from saltbush's own configuration
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	_, werr := f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return nil, fmt.Errorf("master key %s: %w", path, err)
	}
	return key, nil
}

// DevCredentials is the development key the first start printed.
type DevCredentials = iam.BootstrapResult

// bootstrap makes the development identities on an empty store and writes
// what a newcomer needs into the data directory: an AWS CLI profile with
// the new access key (only the replica that made it knows the secret), and
// the admin CLI's certificate (refreshed on every start, from the CA every
// replica shares).
func (s *Server) bootstrap(ctx context.Context, keys *iam.Service, ca *pki.Authority) error {
	res, created, err := keys.Bootstrap(ctx, iam.Bootstrap{AccountID: s.cfg.DevAccount, UserName: DevUserName, AdminService: AdminService})
	if err != nil {
		return err
	}
	if created {
		s.dev = &res
		dir := filepath.Join(s.cfg.DataDir, "aws")
		if err := writeAWSProfile(dir, res, s.cfg.Cluster.Region, "http://"+s.HTTPAddr()); err != nil {
			return err
		}
		// The one place the secret is shown: stderr of the first start,
		// not the structured log (which is kept and shipped).
		banner := s.cfg.Banner
		if banner == nil {
			banner = io.Discard
		}
		_, _ = fmt.Fprintf(banner, "\nsaltbush: created development account %s and user %s\n"+
			"  aws_access_key_id     = %s\n  aws_secret_access_key = %s\n"+
			"AWS CLI profile written to %s; use it with:\n"+
			"  export AWS_CONFIG_FILE=%s AWS_SHARED_CREDENTIALS_FILE=%s AWS_PROFILE=saltbush\n\n",
			res.AccountID, res.UserARN, res.AccessKeyID, res.SecretAccessKey, dir,
			filepath.Join(dir, "config"), filepath.Join(dir, "credentials"))
		s.log.Info("created development identities", "account", res.AccountID, "user", res.UserARN,
			"access_key_id", res.AccessKeyID, "profile_dir", dir)
	}
	return s.writeAdminCertificate(ctx, ca)
}

// writeAWSProfile writes a config and a credentials file an AWS CLI or SDK
// reads through AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE.
func writeAWSProfile(dir string, res iam.BootstrapResult, region, endpoint string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// The endpoint is set per service (a services section, which the AWS
	// CLI v1 and the SDKs honour, as AWS_ENDPOINT_URL_EKS and
	// AWS_ENDPOINT_URL_STS would): EKS, and STS and IAM, which the façade
	// answers too (server/sts). `aws eks get-token` then presigns its STS
	// URL for the façade's address, which token review accepts (the
	// façade's own hosts, server/token HTTPHosts). Every other service is
	// left to AWS.
	config := fmt.Sprintf("# saltbush development profile (account %s)\n[profile saltbush]\nregion = %s\nservices = saltbush\noutput = json\n\n"+
		"[services saltbush]\neks =\n  endpoint_url = %s\nsts =\n  endpoint_url = %s\niam =\n  endpoint_url = %s\n",
		res.AccountID, region, endpoint, endpoint, endpoint)
	creds := fmt.Sprintf("# %s\n[saltbush]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
		res.UserARN, res.AccessKeyID, res.SecretAccessKey)
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte(config), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "credentials"), []byte(creds), 0o600)
}

// TLSDir is where a server keeps the admin CLI's credentials.
func (c Config) TLSDir() string { return filepath.Join(c.DataDir, "pki") }

// writeAdminCertificate writes ca.crt, admin.crt and admin.key to the data
// directory, reissuing the certificate when it is missing or past half its
// life.
func (s *Server) writeAdminCertificate(ctx context.Context, ca *pki.Authority) error {
	dir := s.cfg.TLSDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	bundle, _ := ca.Bundle()
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), bundle, 0o644); err != nil { //nolint:gosec // G306: a CA bundle is public; the admin CLI of any user reads it
		return err
	}
	certPath, keyPath := filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")
	if fresh(certPath, bundle) {
		return nil
	}
	certPEM, keyPEM, serial, err := ca.IssueLocal(ctx, identity.ServiceID(AdminService), 30*24*time.Hour)
	if err != nil {
		return fmt.Errorf("admin certificate: %w", err)
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(certPath, certPEM, 0o600); err != nil {
		return err
	}
	s.log.Info("wrote the admin CLI certificate", "path", certPath, "serial", serial)
	return nil
}

// fresh reports whether the certificate at path is readable, within the
// first half of its life, and signed by a CA the port still trusts (after
// `cert remove-ca` an old certificate would lock the admin out).
func fresh(path string, bundle []byte) bool {
	b, err := os.ReadFile(path) //nolint:gosec // G304: admin.crt in the data directory from saltbush's own configuration
	if err != nil {
		return false
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false
	}
	half := cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) / 2)
	if !time.Now().Before(half) {
		return false
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return false
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}
