package conformance

import (
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"

	"github.com/saltbush/saltbush/tests/saltbushbin"
)

// Edge cases found in review, each once a defect.

// TestAddonTokenValidated: every operation that takes a clientRequestToken
// refuses one that is not 1-64 printable ASCII characters, as CreateCluster
// does (it was once accepted, and stored, by CreateAddon and UpdateAddon).
func TestAddonTokenValidated(t *testing.T) {
	h := newAddonHarness(t)
	ctx := ctxT(t)
	bad := strings.Repeat("t", 65) + " \x01"

	_, err := h.eks.CreateCluster(ctx, func() *eks.CreateClusterInput {
		in := createInput("token-check")
		in.ClientRequestToken = aws.String(bad)
		return in
	}())
	checkAWSErr(t, err, awsErr{code: "InvalidParameterException", cluster: "token-check"})

	before := addonKeyspace(t, h)
	_, err = h.eks.CreateAddon(ctx, &eks.CreateAddonInput{
		ClusterName: aws.String(h.cluster), AddonName: aws.String("coredns"), ClientRequestToken: aws.String(bad),
	})
	checkAWSErr(t, err, awsErr{code: "InvalidParameterException", cluster: h.cluster, addon: "coredns"})
	addonNoWrites(t, h, before)
}

// TestAddonBodyPathMembers: members bound to URI labels (clusterName,
// addonName) are refused in a body (docs/contracts.md, "Façade wire rules": unknown body members are
// rejected); the path value once silently won over them.
func TestAddonBodyPathMembers(t *testing.T) {
	h := newAddonHarness(t)
	base := h.srv.URL + "/clusters/" + h.cluster
	st, hdr, body := rawCall(t, h.srv, "POST", base+"/addons", `{"addonName": "coredns", "clusterName": "some-other-cluster"}`)
	if st != http.StatusBadRequest {
		t.Errorf("CreateAddon with a clusterName body member: %d %s %v, want 400", st, hdr.Get("X-Amzn-ErrorType"), body)
	}
}

// TestAdminReportRejectedFails: `saltbush admin addon report` fails (exit
// non-zero) and prints "accepted": false when the report changed nothing,
// so an operator or a script can tell a stale report from an applied one.
func TestAdminReportRejectedFails(t *testing.T) {
	h := newAddonHarness(t)
	addonCreate(t, h, &eks.CreateAddonInput{AddonName: aws.String("coredns")})

	cmd := exec.Command(saltbushbin.Path(t), "admin", "--grpc-addr", h.srv.GRPCAddr(), "--account", h.account, "--tls-dir", h.srv.Config.TLSDir(),
		"addon", "report", h.cluster, "coredns", "READY", "--generation", "7")
	out, err := cmd.CombinedOutput()
	if got := h.get(t, "coredns"); got.GetStatus() != "CREATING" {
		t.Fatalf("a report for generation 7 changed the add-on: %s", got.GetStatus())
	}
	// protojson varies its whitespace on purpose: match, don't compare.
	if err == nil || !regexp.MustCompile(`"accepted":\s*false`).Match(out) {
		t.Errorf("rejected report: exit error %v, want one, and output with \"accepted\": false:\n%s", err, out)
	}
}
