// Package published owns the add-on versions a cloud's operators publish
// beside the embedded catalogue (CatalogControlService): their validation
// and storage (catalog/addons/{addon}/{version}, one immutable record per
// version), retirement, and the catalogue every other service reads,
// embedded plus published, as one account sees it (catalog.Source).
//
// Every replica reads the records through the store's read view, which the
// store's etcd watch keeps current, so a version published on one replica
// is served by all of them; a replica parses each record once (by digest)
// and re-merges only when the keys under the prefix or their revisions
// change.
package published

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	storagev1 "github.com/saltbush/saltbush/api/saltbush/storage/v1"
	"github.com/saltbush/saltbush/errdefs"
	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server/catalog"
	"github.com/saltbush/saltbush/store"
)

// Service publishes add-on versions and serves the merged catalogue.
type Service struct {
	store    *store.Store
	embedded *catalog.Catalog
	now      func() time.Time
	log      *slog.Logger

	// mu guards shelf, the last merged state, and parsed, the parsed
	// versions by digest (a retirement changes a record's revision, not its
	// files).
	mu     sync.Mutex
	shelf  *shelf
	parsed map[string]*catalog.Published
}

// shelf is the published versions as of one listing of the prefix.
type shelf struct {
	// entries are by key, each with the modification revision it was read
	// at: a listing that finds the same keys at the same revisions is
	// answered from this shelf, and a changed key is the only one re-read.
	entries map[string]entry
	// offers are by add-on name.
	offers map[string][]catalog.Offer
}

type entry struct {
	modRev int64
	addon  string
	offer  catalog.Offer
}

// New returns the service over st, serving embedded beside the published
// versions.
func New(st *store.Store, embedded *catalog.Catalog, now func() time.Time, log *slog.Logger) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{store: st, embedded: embedded, now: now, log: log,
		shelf: &shelf{entries: map[string]entry{}, offers: map[string][]catalog.Offer{}}, parsed: map[string]*catalog.Published{}}
}

var _ catalog.Source = (*Service)(nil)

// Lookup implements catalog.Source.
func (s *Service) Lookup(ctx context.Context, account, name string) (*catalog.Addon, bool, error) {
	sh, err := s.current(ctx)
	if err != nil {
		return nil, false, err
	}
	emb, _ := s.embedded.Addon(name)
	a, ok := catalog.Merge(emb, sh.offers[name], account)
	return a, ok, nil
}

// List implements catalog.Source.
func (s *Service) List(ctx context.Context, account string) ([]*catalog.Addon, error) {
	sh, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	var out []*catalog.Addon
	for _, emb := range s.embedded.Addons() {
		if a, ok := catalog.Merge(emb, sh.offers[emb.Name], account); ok {
			out = append(out, a)
		}
	}
	for name, offers := range sh.offers {
		if _, embedded := s.embedded.Addon(name); embedded {
			continue
		}
		if a, ok := catalog.Merge(nil, offers, account); ok {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *catalog.Addon) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// current returns the shelf for what the store holds now, as this
// replica's read view sees it (read-your-writes: a version this replica
// published is seen).
func (s *Service) current(ctx context.Context) (*shelf, error) {
	revs := map[string]int64{}
	token := ""
	for {
		page, err := s.store.ReadList(ctx, store.ListOptions{Prefix: store.PublishedAddonsPrefix, Scope: "published-addons", Token: token, KeysOnly: true})
		if err != nil {
			return nil, fmt.Errorf("list published add-on versions: %w", err)
		}
		for _, kv := range page.Items {
			revs[kv.Key] = kv.ModRev
		}
		if page.NextToken == "" {
			break
		}
		token = page.NextToken
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shelf.same(revs) {
		return s.shelf, nil
	}
	next := &shelf{entries: make(map[string]entry, len(revs)), offers: map[string][]catalog.Offer{}}
	for key, modRev := range revs {
		e, ok := s.shelf.entries[key]
		if !ok || e.modRev != modRev {
			var err error
			if e, ok, err = s.load(ctx, key); err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
		}
		next.entries[key] = e
		if e.offer.Published != nil {
			next.offers[e.addon] = append(next.offers[e.addon], e.offer)
		}
	}
	// Forget parsed versions no record names any more.
	live := map[string]bool{}
	for _, e := range next.entries {
		if e.offer.Published != nil {
			live[e.offer.Published.Digest] = true
		}
	}
	for d := range s.parsed {
		if !live[d] {
			delete(s.parsed, d)
		}
	}
	s.shelf = next
	return next, nil
}

// load reads and parses one record for the shelf: false when it is gone,
// an entry without an offer when it does not load. The caller holds s.mu.
func (s *Service) load(ctx context.Context, key string) (entry, bool, error) {
	rec := &storagev1.PublishedAddonVersionRecord{}
	modRev, err := s.store.Read(ctx, key, rec)
	if errors.Is(err, store.ErrNotFound) {
		return entry{}, false, nil // removed since the listing (a restore); the next lookup relists
	}
	if err != nil {
		return entry{}, false, fmt.Errorf("read %s: %w", key, err)
	}
	p, ok := s.parsed[rec.GetDigest()]
	if !ok {
		if p, err = catalog.ParseStored(rec.GetFiles()); err != nil {
			// Stored versions were validated when published; one that no
			// longer loads (a newer loader is stricter) is left out, loudly,
			// rather than failing every lookup.
			// Kept without an offer, so that it is not read again until
			// it changes.
			s.log.Error("published add-on version does not load; not served", "key", key, "err", err)
			return entry{modRev: modRev, addon: rec.GetAddonName()}, true, nil
		}
		s.parsed[rec.GetDigest()] = p
	}
	if _, shadowed := s.embeddedVersion(rec.GetAddonName(), rec.GetVersion()); shadowed {
		s.log.Warn("published add-on version is also embedded; the embedded one is served", "key", key)
	}
	return entry{modRev: modRev, addon: rec.GetAddonName(),
		offer: catalog.Offer{Published: p, Accounts: rec.GetAccountIds(), Retired: rec.GetRetired()}}, true, nil
}

// same reports whether a listing found exactly the shelf's keys at the
// shelf's revisions.
func (sh *shelf) same(revs map[string]int64) bool {
	if len(sh.entries) != len(revs) {
		return false
	}
	for k, e := range sh.entries {
		if revs[k] != e.modRev {
			return false
		}
	}
	return true
}

func (s *Service) embeddedVersion(addon, version string) (*catalog.Version, bool) {
	a, ok := s.embedded.Addon(addon)
	if !ok {
		return nil, false
	}
	return a.Version(version)
}

// Publish validates and stores one version (PublishAddonVersion).
func (s *Service) Publish(ctx context.Context, req *controlv1.PublishAddonVersionRequest) (*controlv1.PublishedAddonVersion, error) {
	if req.GetVersion() == "" {
		return nil, errdefs.InvalidParameter("version is required: name the version of addon.yaml to publish.")
	}
	accounts := slices.Clone(req.GetAccountIds())
	for _, a := range accounts {
		if err := identity.ValidateAccountID(a); err != nil {
			return nil, errdefs.InvalidParameter("accountIds: %v.", err)
		}
	}
	slices.Sort(accounts)
	accounts = slices.Compact(accounts)
	p, err := catalog.ParsePublished(req.GetFiles(), req.GetVersion())
	if err != nil {
		return nil, errdefs.InvalidParameter("The add-on directory is not valid: %v.", err)
	}
	v := p.Version
	name := v.Addon.Name
	if emb, ok := s.embedded.Addon(name); ok {
		if _, dup := emb.Version(v.Version); dup {
			return nil, errdefs.ResourceInUse("Addon %s version %s is part of the built-in catalogue; publish another version.", name, v.Version)
		}
		if err := sameAddon(emb, v.Addon); err != nil {
			return nil, errdefs.InvalidParameter("addon.yaml: %v, as the built-in add-on %s has.", err, name)
		}
	}
	// A private add-on's versions agree on what the add-on is, as one
	// addon.yaml would make them.
	others, err := s.records(ctx, name)
	if err != nil {
		return nil, err
	}
	for _, o := range others {
		op, err := catalog.ParseStored(o.GetFiles())
		if err != nil {
			continue
		}
		if err := sameAddon(op.Version.Addon, v.Addon); err != nil {
			return nil, errdefs.InvalidParameter("addon.yaml: %v, as version %s published before has.", err, o.GetVersion())
		}
		if o.GetVersion() == v.Version {
			if o.GetDigest() == p.Digest {
				return nil, errdefs.ResourceInUse("Addon %s version %s is already published with these files (%s).", name, v.Version, p.Digest)
			}
			return nil, errdefs.ResourceInUse("Addon %s version %s is already published (%s); published versions are immutable: publish a new version.", name, v.Version, o.GetDigest())
		}
	}
	who, _ := identity.FromContext(ctx)
	rec := &storagev1.PublishedAddonVersionRecord{
		AddonName: name, Version: v.Version, Files: p.Files, AccountIds: accounts, Digest: p.Digest,
		PublishedAt: timestamppb.New(s.now()), PublishedBy: who.PrincipalARN,
	}
	key := store.PublishedAddonVersionKey(name, v.Version)
	if _, err := s.store.Commit(ctx, store.NewTxn().Create(key, rec)); err != nil {
		if errors.Is(err, store.ErrExists) {
			return nil, errdefs.ResourceInUse("Addon %s version %s is already published; published versions are immutable: publish a new version.", name, v.Version)
		}
		return nil, err
	}
	s.log.Info("add-on version published", "addon", name, "version", v.Version, "digest", p.Digest, "accounts", accounts, "by", who.PrincipalARN)
	return toAPI(rec, p), nil
}

// sameAddon reports how two addon.yaml files disagree on the add-on level
// fields an add-on has once.
func sameAddon(want, got *catalog.Addon) error {
	switch {
	case want.Type != got.Type:
		return fmt.Errorf("type must be %q", want.Type)
	case want.DefaultNamespace != got.DefaultNamespace:
		return fmt.Errorf("defaultNamespace must be %q", want.DefaultNamespace)
	case want.Publisher != got.Publisher:
		return fmt.Errorf("publisher must be %q", want.Publisher)
	case want.Owner != got.Owner:
		return fmt.Errorf("owner must be %q", want.Owner)
	case want.Hidden != got.Hidden:
		return fmt.Errorf("hidden must be %t", want.Hidden)
	}
	return nil
}

// SetRetired retires or unretires a published version.
func (s *Service) SetRetired(ctx context.Context, addon, version string, retired bool) (*controlv1.PublishedAddonVersion, error) {
	if addon == "" || version == "" {
		return nil, errdefs.InvalidParameter("addonName and version are required.")
	}
	key := store.PublishedAddonVersionKey(addon, version)
	var out *storagev1.PublishedAddonVersionRecord
	// Update writes cur back, guarded by its revision, when it changed.
	_, err := store.Update(ctx, s.store, key, &storagev1.PublishedAddonVersionRecord{}, func(cur *storagev1.PublishedAddonVersionRecord, _ *store.Txn) error {
		out = cur
		if cur.GetRetired() == retired {
			return nil // already so: nothing to write
		}
		cur.Retired = retired
		cur.RetiredAt = nil
		if retired {
			cur.RetiredAt = timestamppb.New(s.now())
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, errdefs.NotFound("No published version %s of addon %s.", version, addon)
	}
	if err != nil {
		return nil, err
	}
	p, err := catalog.ParseStored(out.GetFiles())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return toAPI(out, p), nil
}

// ListPublished lists the published versions (ListPublishedAddonVersions).
func (s *Service) ListPublished(ctx context.Context, addon string) ([]*controlv1.PublishedAddonVersion, error) {
	recs, err := s.records(ctx, addon)
	if err != nil {
		return nil, err
	}
	var out []*controlv1.PublishedAddonVersion
	for _, r := range recs {
		p, err := catalog.ParseStored(r.GetFiles())
		if err != nil {
			s.log.Error("published add-on version does not load", "addon", r.GetAddonName(), "version", r.GetVersion(), "err", err)
			out = append(out, toAPI(r, nil))
			continue
		}
		out = append(out, toAPI(r, p))
	}
	slices.SortStableFunc(out, func(a, b *controlv1.PublishedAddonVersion) int {
		if c := strings.Compare(a.GetAddonName(), b.GetAddonName()); c != 0 {
			return c
		}
		return catalog.CompareVersions(b.GetVersion(), a.GetVersion())
	})
	return out, nil
}

// records reads the published records of one add-on, or of all when addon
// is "".
func (s *Service) records(ctx context.Context, addon string) ([]*storagev1.PublishedAddonVersionRecord, error) {
	prefix := store.PublishedAddonsPrefix
	if addon != "" {
		prefix = store.PublishedAddonPrefix(addon)
	}
	var out []*storagev1.PublishedAddonVersionRecord
	token := ""
	for {
		page, err := s.store.List(ctx, store.ListOptions{Prefix: prefix, Scope: "published-addons", Token: token})
		if err != nil {
			return nil, err
		}
		for _, kv := range page.Items {
			r := &storagev1.PublishedAddonVersionRecord{}
			if err := store.Decode(kv.Value, r); err != nil {
				return nil, fmt.Errorf("%s: %w", kv.Key, err)
			}
			out = append(out, r)
		}
		if page.NextToken == "" {
			return out, nil
		}
		token = page.NextToken
	}
}

func toAPI(r *storagev1.PublishedAddonVersionRecord, p *catalog.Published) *controlv1.PublishedAddonVersion {
	out := &controlv1.PublishedAddonVersion{
		AddonName: r.GetAddonName(), Version: r.GetVersion(), AccountIds: r.GetAccountIds(), Digest: r.GetDigest(),
		PublishedAt: r.GetPublishedAt(), PublishedBy: r.GetPublishedBy(), Retired: r.GetRetired(), RetiredAt: r.GetRetiredAt(),
	}
	if p != nil {
		a := p.Version.Addon
		out.Type, out.Publisher, out.Owner = a.Type, a.Publisher, a.Owner
		for _, c := range p.Version.Compatibilities {
			out.ClusterVersions = append(out.ClusterVersions, c.ClusterVersion)
			if c.Default {
				out.DefaultFor = append(out.DefaultFor, c.ClusterVersion)
			}
		}
	}
	return out
}
