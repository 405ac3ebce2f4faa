package server

import (
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/saltbush/saltbush/gateway/sigv4"
	"github.com/saltbush/saltbush/server/access"
	"github.com/saltbush/saltbush/server/accesspolicy"
	"github.com/saltbush/saltbush/server/addon"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/server/cluster"
	"github.com/saltbush/saltbush/server/delivery"
	"github.com/saltbush/saltbush/server/iam"
	"github.com/saltbush/saltbush/server/insight"
	"github.com/saltbush/saltbush/server/podidentity"
	"github.com/saltbush/saltbush/server/published"
	"github.com/saltbush/saltbush/server/review"
	"github.com/saltbush/saltbush/server/tagging"
	"github.com/saltbush/saltbush/server/token"
	"github.com/saltbush/saltbush/server/update"
	"github.com/saltbush/saltbush/server/version"
)

// newDomain builds the resource services over the store.
func (s *Server) newDomain(keyCache *iam.Cache) (domain, error) {
	d := domain{keys: s.keys, ca: s.ca}
	var err error
	if d.clusters, d.addons, d.published, err = s.newClustersAndAddons(keyCache); err != nil {
		return domain{}, err
	}
	d.updates = update.NewService(s.store, d.clusters, s.log.With("service", "update"))
	if d.versions, err = version.NewService(s.store, d.clusters, version.Config{
		Versions: s.cfg.Cluster.KubernetesVersions, Default: s.cfg.Cluster.DefaultKubernetesVersion,
		IdempotencyTTL: s.cfg.Cluster.IdempotencyTTL, Now: s.cfg.Cluster.Now,
	}, s.log.With("service", "version")); err != nil {
		return domain{}, err
	}
	d.insights = insight.NewService(s.store, d.clusters, d.versions, d.addons.Catalog(), s.cfg.Cluster.Now,
		s.log.With("service", "insight"))
	// A rollback is judged by the verdict the ROLLBACK_READINESS insight
	// renders; the insight service reads the versions, so it is given to
	// the version service once both exist.
	d.versions.SetRollbackReadiness(d.insights)
	policies := accesspolicy.NewCatalog()
	if d.entries, err = access.NewService(s.store, d.clusters, keyCache, policies, access.Config{
		Region: s.cfg.Cluster.Region, IdempotencyTTL: s.cfg.Cluster.IdempotencyTTL, Now: s.cfg.Cluster.Now,
	}, s.log.With("service", "access")); err != nil {
		return domain{}, err
	}
	if d.pods, err = podidentity.NewService(s.store, d.clusters, podidentity.Config{
		Region: s.cfg.Cluster.Region, IdempotencyTTL: s.cfg.Cluster.IdempotencyTTL, Now: s.cfg.Cluster.Now,
	}, s.log.With("service", "podidentity")); err != nil {
		return domain{}, err
	}
	if d.reviews, err = s.newReviews(d.clusters, keyCache, d.entries, policies); err != nil {
		return domain{}, err
	}
	d.tags = tagging.NewService(s.cfg.Cluster.Region, map[string]tagging.Resource{
		"cluster":           d.clusters.Tagging(),
		"addon":             d.addons.Tagging(),
		"access-entry":      d.entries.Tagging(),
		podidentity.ARNType: d.pods.Tagging(),
	}, s.log.With("service", "tagging"))
	if d.deliveries, err = s.newDelivery(d.clusters, d.addons, d.versions); err != nil {
		return domain{}, err
	}
	return d, nil
}

// newClustersAndAddons builds the cluster service and the add-on service
// over the configured (or embedded) catalogue and the versions operators
// published beside it.
func (s *Server) newClustersAndAddons(keyCache *iam.Cache) (*cluster.Service, *addon.Service, *published.Service, error) {
	clusterCfg := s.cfg.Cluster
	clusterCfg.RoleOfSession = keyCache.EffectivePrincipal
	clusters, err := cluster.NewService(s.store, clusterCfg, s.log.With("service", "cluster"))
	if err != nil {
		return nil, nil, nil, err
	}
	cat := s.cfg.Catalog
	if cat == nil {
		if cat, err = catalog.Load(); err != nil {
			return nil, nil, nil, fmt.Errorf("add-on catalogue: %w", err)
		}
	}
	pub := published.New(s.store, cat, s.cfg.Cluster.Now, s.log.With("service", "published"))
	addons, err := addon.NewService(s.store, clusters, pub, s.cfg.Addon, s.registry, s.log.With("service", "addon"))
	if err != nil {
		return nil, nil, nil, err
	}
	return clusters, addons, pub, nil
}

// newReviews builds the token and access reviews guest agents ask for.
func (s *Server) newReviews(clusters *cluster.Service, keyCache *iam.Cache, entries *access.Service, policies *accesspolicy.Catalog) (*review.Service, error) {
	// Reviews read cluster records and access entries from a watch-fed
	// view of the clusters whose agents ask, stopped with the server.
	view, err := review.NewView(s.store, review.DefaultViewIdle, s.registry, s.log.With("component", "review-view"))
	if err != nil {
		return nil, err
	}
	go view.Run(s.background)
	s.tokens = &token.Verifier{
		// AWS's STS hosts, saltbush's own region's (a private cloud may
		// name its region anything), and the configured ones; the
		// façade's own address (it answers STS) is added by listen.
		Hosts:         token.DefaultHosts(append([]string{"sts." + s.cfg.Cluster.Region + ".amazonaws.com"}, s.cfg.STSHosts...)...),
		Lookup:        secretLookup(keyCache),
		SessionLookup: sessionLookup(keyCache),
		Keys:          sigv4.NewSigningKeys(),
	}
	return review.NewService(clusters, keyCache, entries, view, s.tokens, policies, s.registry, s.log.With("service", "review"))
}

// newDelivery builds the deadline sweeper (add-on deadlines, and rollback
// timeouts) and the delivery service, both named for this replica.
func (s *Server) newDelivery(clusters *cluster.Service, addons *addon.Service, versions *version.Service) (*delivery.Service, error) {
	replica := s.cfg.ReplicaName
	if replica == "" {
		host, _ := os.Hostname()
		replica = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	s.sweeper = addons.NewSweeper(replica, versions.SweepRollbackDeadlines)
	s.registry.MustRegister(sweeperLeaderGauge(s.sweeper))
	deliveryCfg := s.cfg.Delivery
	deliveryCfg.Replica = replica
	deliveries, err := delivery.NewService(s.store, clusters, addons, deliveryCfg, s.registry, s.log.With("service", "delivery"))
	s.deliveries = deliveries
	return deliveries, err
}

// sweeperLeaderGauge says whether this replica leads the add-on deadline
// sweeper election: summed over replicas it is 1, and which one sweeps is
// what an operator looks for when deadlines do not fire.
func sweeperLeaderGauge(sweeper *addon.Sweeper) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "saltbush_addon_sweeper_leader",
		Help: "1 while this replica leads the add-on deadline sweeper election, else 0.",
	}, func() float64 {
		if sweeper.Leader() {
			return 1
		}
		return 0
	})
}
