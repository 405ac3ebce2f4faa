package bench

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/saltbush/saltbush/identity"
	"github.com/saltbush/saltbush/server"
	"github.com/saltbush/saltbush/server/servertest"
)

// trusted is the façade authenticator that verifies nothing: every request
// is the account's root. Only this benchmark uses it, as the baseline SigV4
// verification is measured against.
type trusted string

func (a trusted) Authenticate(*http.Request, []byte) (identity.Caller, error) {
	return identity.RootCaller(string(a)), nil
}

// BenchmarkDescribeClusterAuth measures DescribeCluster through the façade
// of two saltbush servers over one etcd, at 1 and 64 clients:
//
//	sigv4     the server's own façade with SigV4: verification against the
//	          key store's in-memory mirror, then the development user's
//	          policies evaluated by the services' authorization
//	no-auth   a second server over the same etcd whose façade authenticator
//	          (server.Config.Authenticator) trusts every request as the
//	          account root (no policy lookup either)
//
// Both are served alike (the servers' own listeners, no throttling, and
// reads are not audited) and receive the same request from a bare net/http
// client; the sigv4 path
// replays one request signed before the clock starts (a signature stays
// valid for 15 minutes), so the client does no signing work on the shared
// cores and the difference is the server's. The parent prints the overhead
// ratio sigv4/no-auth of p50 latency and of throughput.
func BenchmarkDescribeClusterAuth(b *testing.B) {
	opt, mode := fsyncMode()
	srv := servertest.Start(b, opt)
	fmt.Printf("fsync: %s\n", mode)
	ctx := context.Background()
	dev := srv.Dev(b)
	if _, err := srv.EKS(b).CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String("bench-auth"), RoleArn: aws.String(roleARN), ResourcesVpcConfig: &ekstypes.VpcConfigRequest{},
	}); err != nil {
		b.Fatal(err)
	}
	// Two façades over the same etcd, served alike; they differ only in
	// the authenticator.
	plain := servertest.Start(b, opt, servertest.WithEtcdEndpoints(srv.EtcdEndpoints(b)),
		servertest.WithConfig(func(c *server.Config) { c.Authenticator = trusted(dev.AccountID) }))

	signed, err := http.NewRequest(http.MethodGet, srv.URL+"/clusters/bench-auth", nil)
	if err != nil {
		b.Fatal(err)
	}
	empty := sha256.Sum256(nil)
	if err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: dev.AccessKeyID, SecretAccessKey: dev.SecretAccessKey},
		signed, hex.EncodeToString(empty[:]), "eks", srv.Config.Cluster.Region, time.Now()); err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}, Timeout: 30 * time.Second}
	get := func(base string, header http.Header) func(context.Context) error {
		return func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/clusters/bench-auth", nil)
			if err != nil {
				return err
			}
			for k, v := range header {
				req.Header[k] = v
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"bench-auth"`) {
				return fmt.Errorf("DescribeCluster: %d %s", resp.StatusCode, body)
			}
			return nil
		}
	}
	paths := []struct {
		name string
		op   func(context.Context) error
	}{
		{"sigv4", get(srv.URL, signed.Header)},
		{"no-auth", get(plain.URL, nil)},
	}
	// The two paths alternate, three rounds each, so a drift of the shared
	// machine (etcd compaction, GC, other processes) hits both alike; the
	// summary takes each path's median round.
	const rounds = 3
	runs := map[string]map[int][]result{}
	for _, p := range paths {
		runs[p.name] = map[int][]result{}
	}
	for _, c := range concurrencies {
		for range rounds {
			for _, p := range paths {
				// b.Run calls the function more than once (a 1-op trial
				// first): only the last, full run counts.
				var last result
				b.Run(fmt.Sprintf("%s/c=%d", p.name, c), func(b *testing.B) {
					last = measure(b, c, p.op)
				})
				runs[p.name][c] = append(runs[p.name][c], last)
			}
		}
	}
	results := map[string]map[int]result{}
	for name, byC := range runs {
		results[name] = map[int]result{}
		for c, rs := range byC {
			results[name][c] = medianRound(rs)
		}
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "DescribeCluster with and without SigV4 (fsync %s), same run, median of %d alternating rounds\n", mode, rounds)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "clients\tsigv4 ops/s\tno-auth ops/s\tthroughput ratio\tsigv4 p50\tno-auth p50\tp50 overhead")
	for _, c := range concurrencies {
		s, n := results["sigv4"][c], results["no-auth"][c]
		if s.n == 0 || n.n == 0 {
			continue
		}
		_, _ = fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.3f\t%.3fms\t%.3fms\t%+.1f%%\n", c, s.opsPerS, n.opsPerS, s.opsPerS/n.opsPerS,
			ms(s.p50), ms(n.p50), 100*(float64(s.p50)/float64(n.p50)-1))
	}
	_ = tw.Flush()
	fmt.Print("\n" + sb.String() + "\n")
}

// medianRound is the round with the median throughput.
func medianRound(rs []result) result {
	if len(rs) == 0 {
		return result{}
	}
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b result) int { return cmp.Compare(a.opsPerS, b.opsPerS) })
	return sorted[len(sorted)/2]
}
