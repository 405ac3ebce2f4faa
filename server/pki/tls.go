package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/saltbush/saltbush/identity"
)

// ServerTLSConfig is the TLS config of the public gRPC port: TLS 1.3, a
// client certificate required and verified against the trust bundle,
// served with ServingCertificate(hosts). The bundle is read from the
// in-memory view at every handshake (GetConfigForClient), so rotations and
// removals apply to new connections without a restart. A revoked
// certificate, or one that does not name exactly one saltbush SPIFFE id, is
// refused at the handshake; expired certificates and unknown CAs are
// refused by Go's chain verification. Start must have returned before the
// first handshake.
func (a *Authority) ServerTLSConfig(hosts []string) *tls.Config {
	getCert := a.ServingCertificate(hosts)
	base := func() *tls.Config {
		return &tls.Config{
			MinVersion:       tls.VersionTLS13,
			ClientAuth:       tls.RequireAndVerifyClientCert,
			GetCertificate:   getCert,
			VerifyConnection: a.verifyConnection,
			NextProtos:       []string{"h2"},
			// A resumed session skips chain verification against the
			// current bundle; gRPC connections are long-lived, so resumption
			// buys little and would let a removed CA's certificate back in.
			SessionTicketsDisabled: true,
		}
	}
	cfg := base()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		t := a.current()
		if t == nil {
			return nil, errors.New("pki: the trust bundle is not loaded yet")
		}
		c := base()
		c.ClientCAs = t.pool
		return c, nil
	}
	return cfg
}

// verifyConnection runs after Go has verified the client's chain.
func (a *Authority) verifyConnection(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("pki: a client certificate is required")
	}
	leaf := cs.PeerCertificates[0]
	if a.Revoked(serialOf(leaf)) {
		a.log.Info("pki: refused a revoked client certificate", "serial", serialOf(leaf))
		return fmt.Errorf("pki: client certificate %s is revoked", serialOf(leaf))
	}
	if _, err := callerOf(leaf); err != nil {
		a.log.Info("pki: refused a client certificate", "serial", serialOf(leaf), "error", err)
		return err
	}
	return nil
}

// callerOf is the caller a verified leaf names: exactly one URI SAN, a
// saltbush service or agent SPIFFE id.
func callerOf(leaf *x509.Certificate) (identity.Caller, error) {
	if len(leaf.URIs) != 1 {
		return identity.Caller{}, fmt.Errorf("pki: client certificate %s has %d URI SANs; exactly one saltbush SPIFFE id is required", serialOf(leaf), len(leaf.URIs))
	}
	c, err := identity.FromSPIFFE(leaf.URIs[0].String())
	if err != nil {
		return identity.Caller{}, fmt.Errorf("pki: client certificate %s: %w", serialOf(leaf), err)
	}
	return c, nil
}

// authenticate sets the caller of a call from its connection's verified
// client certificate, checked again at call time: a certificate revoked, or
// a CA removed, after the connection was made is refused on its next call.
// The returned context ends at the certificate's NotAfter, so no call or
// stream outlives it. Request metadata is never consulted.
func (a *Authority) authenticate(ctx context.Context) (context.Context, context.CancelFunc, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, nil, status.Error(codes.Unauthenticated, "A verified client certificate is required.")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil, nil, status.Error(codes.Unauthenticated, "A verified client certificate is required.")
	}
	leaf := info.State.VerifiedChains[0][0]
	serial := serialOf(leaf)
	if a.Revoked(serial) {
		return nil, nil, status.Errorf(codes.Unauthenticated, "Client certificate %s is revoked.", serial)
	}
	t := a.current()
	trusted := false
	for _, chain := range info.State.VerifiedChains {
		if t != nil && len(chain) > 0 && t.trusts(chain[len(chain)-1]) {
			trusted = true
			break
		}
	}
	if !trusted {
		return nil, nil, status.Errorf(codes.Unauthenticated, "Client certificate %s was issued by a certificate authority that is no longer trusted.", serial)
	}
	if !a.now().Before(leaf.NotAfter) {
		return nil, nil, status.Errorf(codes.Unauthenticated, "Client certificate %s has expired.", serial)
	}
	caller, err := callerOf(leaf)
	if err != nil {
		return nil, nil, status.Errorf(codes.Unauthenticated, "Client certificate %s does not name a saltbush service or agent.", serial)
	}
	ctx, cancel := context.WithDeadline(identity.NewContext(ctx, caller), leaf.NotAfter)
	return ctx, cancel, nil
}

// UnaryInterceptor authenticates every unary call (see authenticate).
func (a *Authority) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, cancel, err := a.authenticate(ctx)
		if err != nil {
			return nil, err
		}
		defer cancel()
		return handler(ctx, req)
	}
}

// StreamInterceptor authenticates every stream (see authenticate); the
// stream's context carries the caller, ends at the certificate's NotAfter,
// and is cancelled when the certificate is revoked while the stream is
// open (a guest agent's stream lives for days: checking only at its start
// would let a revoked instance keep it). context.Cause then is an
// Unauthenticated status naming the serial.
func (a *Authority) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, cancel, err := a.authenticate(ss.Context())
		if err != nil {
			return err
		}
		defer cancel()
		ctx, stop := a.followRevocation(ctx, ss.Context())
		defer stop()
		return handler(srv, &authedStream{ServerStream: ss, ctx: ctx})
	}
}

// openStream is a stream to end if its certificate is revoked.
type openStream struct {
	cancel context.CancelCauseFunc
}

// followRevocation returns a context cancelled, with the revocation as
// its cause, when the certificate of the connection (peerCtx) is
// revoked; stop forgets it.
func (a *Authority) followRevocation(ctx, peerCtx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	p, _ := peer.FromContext(peerCtx)
	info, _ := p.AuthInfo.(credentials.TLSInfo) // authenticate checked both
	serial := serialOf(info.State.VerifiedChains[0][0])
	st := &openStream{cancel: cancel}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, revoked := a.revoked[serial]; revoked {
		cancel(revokedError(serial))
		return ctx, func() {}
	}
	if a.streams[serial] == nil {
		a.streams[serial] = map[*openStream]struct{}{}
	}
	a.streams[serial][st] = struct{}{}
	return ctx, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.streams[serial], st)
		if len(a.streams[serial]) == 0 {
			delete(a.streams, serial)
		}
		cancel(nil)
	}
}

// endRevokedStreams cancels the open streams of serial; a.mu is held.
func (a *Authority) endRevokedStreams(serial string) {
	for st := range a.streams[serial] {
		st.cancel(revokedError(serial))
	}
}

func revokedError(serial string) error {
	return status.Errorf(codes.Unauthenticated, "Client certificate %s is revoked.", serial)
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authedStream) Context() context.Context { return s.ctx }
