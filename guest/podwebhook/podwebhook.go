// Package podwebhook is the pod identity webhook of the cluster, served by
// every guest agent on its VM's loopback, as EKS runs the webhook on its
// control plane (docs/pod-credentials.md): a mutating admission webhook
// that gives a pod the AWS credentials its service account is meant to
// have — web identity (IRSA) for a service account annotated
// eks.amazonaws.com/role-arn, container credentials (EKS Pod Identity) for
// one with a pod identity association.
//
// The mutation is the real one: github.com/aws/amazon-eks-pod-identity-webhook's
// handler, with its service-account cache, the associations of the desired
// set as its container-credentials configuration, and one addition of
// saltbush's: the endpoints of saltbush's STS, EKS and EKS Auth
// (AWS_ENDPOINT_URL_STS, _EKS, _EKS_AUTH), so that the pods' unmodified
// SDKs exchange their tokens at saltbush.
//
// Serving: the apiserver reaches the webhook at https://127.0.0.1:{port}
// on every server VM (MutatingWebhookConfiguration, one for the cluster),
// so every agent serves with a certificate for the loopback address issued
// from one CA of the cluster, kept in a Secret of kube-system that the
// executor creates (ca.go).
package podwebhook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/aws/amazon-eks-pod-identity-webhook/pkg/cache"
	"github.com/aws/amazon-eks-pod-identity-webhook/pkg/containercredentials"
	"github.com/aws/amazon-eks-pod-identity-webhook/pkg/handler"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	deliveryv1 "github.com/saltbush/saltbush/api/saltbush/delivery/v1"
)

// MutatePath is where the apiserver sends pods.
const MutatePath = "/mutate"

// What EKS's webhook is configured with (its command line there): the
// IRSA annotation domain and audience, and Pod Identity's audience, token
// file and credentials URI (the node agent's link-local address). Names
// and paths, no credential.
//
//nolint:gosec // G101: names and paths of where credentials go
const (
	AnnotationDomain             = "eks.amazonaws.com"
	WebIdentityAudience          = "sts.amazonaws.com"
	ContainerCredentialsAudience = "pods.eks.amazonaws.com"
	ContainerCredentialsFullURI  = "http://169.254.170.23/v1/credentials"
	containerCredentialsMount    = "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount"
	containerCredentialsVolume   = "eks-pod-identity-token"
	containerCredentialsToken    = "eks-pod-identity-token"
	webIdentityMount             = "/var/run/secrets/eks.amazonaws.com/serviceaccount"
	// tokenExpiration is IRSA's projected token lifetime (EKS's default).
	tokenExpiration = int64(86400)
	// saLookupGrace lets a pod created right after its service account
	// wait that long for the cache to see it.
	saLookupGrace  = time.Second
	maxReviewBytes = 3 << 20
)

// Config configures the webhook.
type Config struct {
	// Region is set as AWS_REGION and AWS_DEFAULT_REGION in mutated
	// containers (none when "").
	Region string
	// Endpoint is saltbush's façade as pods reach it (https://…): set as
	// AWS_ENDPOINT_URL_STS, _EKS and _EKS_AUTH in mutated containers; none
	// when "", and the pods' SDKs go to AWS's endpoints.
	Endpoint string
	Log      *slog.Logger
}

// Server is the webhook of one agent. Its association set is replaced
// with every desired set (SetAssociations), from the agent's run loop,
// while the apiserver's requests read it.
type Server struct {
	cfg       Config
	kube      kubernetes.Interface
	modifier  *handler.Modifier
	saCache   cache.ServiceAccountCache
	informers informers.SharedInformerFactory
	// associated holds the service accounts with a pod identity
	// association, "namespace/name".
	associated atomic.Pointer[map[string]bool]
	certs      *certs
	log        *slog.Logger
}

// New returns the webhook over the cluster's clients; Run starts its
// caches.
func New(kube kubernetes.Interface, cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, kube: kube, log: cfg.Log, certs: newCerts(kube, cfg.Log)}
	empty := map[string]bool{}
	s.associated.Store(&empty)
	s.informers = informers.NewSharedInformerFactory(kube, 10*time.Minute)
	s.saCache = cache.New(WebIdentityAudience, AnnotationDomain, true, tokenExpiration,
		s.informers.Core().V1().ServiceAccounts(), nil, cache.ComposeRoleArn{}, kube.CoreV1())
	s.modifier = handler.NewModifier(rand.New(rand.NewSource(time.Now().UnixNano())), //nolint:gosec // G404: token-lifetime jitter, not a secret
		handler.WithAnnotationDomain(AnnotationDomain),
		handler.WithMountPath(webIdentityMount),
		handler.WithServiceAccountCache(s.saCache),
		handler.WithContainerCredentialsConfig(s),
		handler.WithRegion(cfg.Region),
		handler.WithSALookupGraceTime(saLookupGrace),
	)
	return s
}

// Run keeps the service-account cache and the serving certificate
// current until ctx ends.
func (s *Server) Run(ctx context.Context) {
	stop := make(chan struct{})
	context.AfterFunc(ctx, func() { close(stop) })
	s.informers.Start(stop)
	// The upstream cache exits the process (klog.Fatal) when its stop
	// channel closes before the service accounts were listed: it is
	// started only once they were (until then a pod's service account is
	// fetched from the apiserver, as the cache does for one it lacks).
	saInformer := s.informers.Core().V1().ServiceAccounts().Informer()
	go func() {
		if toolscache.WaitForCacheSync(stop, saInformer.HasSynced) {
			s.saCache.Start(stop)
		}
	}()
	s.certs.run(ctx)
	s.informers.Shutdown()
}

// SetAssociations makes the service accounts of associations the ones
// whose pods get container credentials (EKS Pod Identity).
func (s *Server) SetAssociations(associations []*deliveryv1.DesiredPodIdentityAssociation) {
	m := make(map[string]bool, len(associations))
	for _, a := range associations {
		m[a.GetNamespace()+"/"+a.GetServiceAccount()] = true
	}
	s.associated.Store(&m)
}

// Get implements the webhook's containercredentials.Config: a service
// account with an association gets Pod Identity's token and URI.
func (s *Server) Get(namespace, serviceAccount string) *containercredentials.PatchConfig {
	if !(*s.associated.Load())[namespace+"/"+serviceAccount] {
		return nil
	}
	return &containercredentials.PatchConfig{
		Audience: ContainerCredentialsAudience, MountPath: containerCredentialsMount, VolumeName: containerCredentialsVolume,
		TokenPath: containerCredentialsToken, FullUri: ContainerCredentialsFullURI,
	}
}

var _ containercredentials.Config = (*Server)(nil)

// Handler answers the apiserver's AdmissionReviews at MutatePath.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+MutatePath, s.mutate)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}

// review is an AdmissionReview of either version: admission.k8s.io/v1
// and v1beta1 have the same fields, and the answer names the version the
// request did.
type review struct {
	APIVersion string                              `json:"apiVersion"`
	Kind       string                              `json:"kind"`
	Request    *admissionv1beta1.AdmissionRequest  `json:"request,omitempty"`
	Response   *admissionv1beta1.AdmissionResponse `json:"response,omitempty"`
}

func (s *Server) mutate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil || len(body) > maxReviewBytes {
		http.Error(w, "the review cannot be read", http.StatusRequestEntityTooLarge)
		return
	}
	var in review
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
		http.Error(w, "the body is not an AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := s.modifier.MutatePod(&admissionv1beta1.AdmissionReview{Request: in.Request})
	if resp.Patch != nil && s.cfg.Endpoint != "" {
		patch, err := withEndpoints(resp.Patch, s.cfg.Endpoint)
		if err != nil {
			// The webhook's own patch is still right: pods then reach AWS's
			// endpoints, which the log says.
			s.log.Error("adding saltbush's endpoints to a pod", "namespace", in.Request.Namespace, "err", err)
		} else {
			resp.Patch = patch
		}
	}
	resp.UID = in.Request.UID
	out, _ := json.Marshal(review{APIVersion: in.APIVersion, Kind: in.Kind, Response: resp})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// String names the webhook in logs.
func (s *Server) String() string {
	return fmt.Sprintf("pod identity webhook (endpoint %q)", s.cfg.Endpoint)
}
