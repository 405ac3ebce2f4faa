package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/catalog"
)

// newAdminPublishCommands are the operator's half of the add-on catalogue
// (docs/operators.md, "Publishing a private add-on"): publish a version
// from a directory in the catalogue's layout, retire and unretire it, list
// what is published. They call CatalogControlService, which only a service
// whose policy allows its methods (the admin service) may call.
func newAdminPublishCommands(af *adminFlags) []*cobra.Command {
	call := func(cmd *cobra.Command, f func(ctx context.Context, c controlv1.CatalogControlServiceClient) error) error {
		conn, err := af.dial()
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		ctx, cancel := context.WithTimeout(cmd.Context(), af.timeout)
		defer cancel()
		return f(ctx, controlv1.NewCatalogControlServiceClient(conn))
	}

	var versions, accounts []string
	publish := &cobra.Command{
		Use:   "publish DIR",
		Short: "Publish the versions of an add-on directory (catalog/addons layout) not yet published",
		Long: `Publish reads DIR (addon.yaml, VERSION/schema.json, VERSION/bundle/*.yaml), checks each
version as the server will (schema, renders with its examples, namespaces, no registry host),
and publishes every listed version (or those --version names) in one transaction each.
A version already published with the same files is reported unchanged; one published
with other files is an error: published versions are immutable.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := os.DirFS(args[0])
			raw, err := os.ReadFile(filepath.Join(args[0], "addon.yaml")) //nolint:gosec // G304: the directory the operator names
			if err != nil {
				return err
			}
			listed, err := catalog.ListedVersions(raw)
			if err != nil {
				return fmt.Errorf("%s: %v", args[0], err)
			}
			want := versions
			if len(want) == 0 {
				want = listed
			}
			// Every version is read and checked before anything is sent:
			// a directory with one broken version publishes nothing.
			type candidate struct {
				files  map[string][]byte
				parsed *catalog.Published
			}
			var todo []candidate
			for _, v := range want {
				files, err := catalog.ReadVersion(dir, v)
				if err != nil {
					return fmt.Errorf("%s: %v", args[0], err)
				}
				p, err := catalog.ParsePublished(files, v)
				if err != nil {
					return fmt.Errorf("%s: %v", args[0], err)
				}
				todo = append(todo, candidate{files, p})
			}
			out := &controlv1.ListPublishedAddonVersionsResponse{}
			err = call(cmd, func(ctx context.Context, c controlv1.CatalogControlServiceClient) error {
				for _, cand := range todo {
					name, v := cand.parsed.Version.Addon.Name, cand.parsed.Version.Version
					have, err := c.ListPublishedAddonVersions(ctx, &controlv1.ListPublishedAddonVersionsRequest{AddonName: name})
					if err != nil {
						return err
					}
					if prior := findPublished(have.GetVersions(), v); prior != nil {
						if prior.GetDigest() != cand.parsed.Digest {
							return fmt.Errorf("addon %s version %s is already published with other files (%s, here %s); published versions are immutable: publish a new version",
								name, v, prior.GetDigest(), cand.parsed.Digest)
						}
						// A note for the operator, beside the output proper.
						_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "addon %s version %s: unchanged (already published)\n", name, v)
						out.Versions = append(out.Versions, prior)
						continue
					}
					resp, err := c.PublishAddonVersion(ctx, &controlv1.PublishAddonVersionRequest{Files: cand.files, Version: v, AccountIds: accounts})
					if err != nil {
						return err
					}
					out.Versions = append(out.Versions, resp.GetVersion())
				}
				return nil
			})
			if err != nil {
				return err
			}
			return af.print(cmd, out)
		},
	}
	publish.Flags().StringSliceVar(&versions, "version", nil, "publish only these versions (default: every version addon.yaml lists)")
	publish.Flags().StringSliceVar(&accounts, "account-ids", nil, "accounts that may see the versions (default: every account)")

	retire := func(use, short string, retired bool) *cobra.Command {
		return &cobra.Command{
			Use: use + " ADDON VERSION", Short: short, Args: cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				return call(cmd, func(ctx context.Context, c controlv1.CatalogControlServiceClient) error {
					var v *controlv1.PublishedAddonVersion
					if retired {
						resp, err := c.RetireAddonVersion(ctx, &controlv1.RetireAddonVersionRequest{AddonName: args[0], Version: args[1]})
						if err != nil {
							return err
						}
						v = resp.GetVersion()
					} else {
						resp, err := c.UnretireAddonVersion(ctx, &controlv1.UnretireAddonVersionRequest{AddonName: args[0], Version: args[1]})
						if err != nil {
							return err
						}
						v = resp.GetVersion()
					}
					return af.print(cmd, &controlv1.ListPublishedAddonVersionsResponse{Versions: []*controlv1.PublishedAddonVersion{v}})
				})
			},
		}
	}
	list := &cobra.Command{
		Use: "list-published [ADDON]", Short: "List the published add-on versions, retired ones included", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &controlv1.ListPublishedAddonVersionsRequest{}
			if len(args) == 1 {
				req.AddonName = args[0]
			}
			return call(cmd, func(ctx context.Context, c controlv1.CatalogControlServiceClient) error {
				resp, err := c.ListPublishedAddonVersions(ctx, req)
				if err != nil {
					return err
				}
				return af.print(cmd, resp)
			})
		},
	}
	return []*cobra.Command{
		publish,
		retire("retire", "Stop offering a published version to new add-ons (add-ons on it keep running)", true),
		retire("unretire", "Offer a retired version again", false),
		list,
	}
}

func findPublished(vs []*controlv1.PublishedAddonVersion, version string) *controlv1.PublishedAddonVersion {
	for _, v := range vs {
		if v.GetVersion() == version {
			return v
		}
	}
	return nil
}

// publishedTables lists published versions, one row each.
func publishedTables(r *controlv1.ListPublishedAddonVersionsResponse) []table {
	t := table{
		header: []string{"ADD-ON", "VERSION", "TYPE", "PUBLISHER", "OWNER", "KUBERNETES", "DEFAULT FOR", "ACCOUNTS", "RETIRED", "PUBLISHED", "DIGEST"},
		empty:  "No published add-on versions.",
	}
	join := func(vs []string, none string) string {
		if len(vs) == 0 {
			return none
		}
		return strings.Join(vs, ",")
	}
	for _, v := range r.GetVersions() {
		retired := "no"
		if v.GetRetired() {
			retired = timeCell(v.GetRetiredAt())
		}
		t.rows = append(t.rows, []string{
			cell(v.GetAddonName()), cell(v.GetVersion()), cell(v.GetType()), cell(v.GetPublisher()), cell(v.GetOwner()),
			join(v.GetClusterVersions(), noValue), join(v.GetDefaultFor(), noValue), join(v.GetAccountIds(), "all"),
			retired, timeCell(v.GetPublishedAt()), cell(v.GetDigest()),
		})
	}
	return []table{t}
}
