package addons_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/eks/types"
)

// TestAddonPodsThatCannotRunFail: pods that really cannot run make the
// add-on CREATE_FAILED, with the issue code and resource the real
// kubelet's status points to — an image the node cannot pull (a
// catalogue version whose image was not built for the node) and a
// container that crashes at start (a Corefile coredns refuses).
func TestAddonPodsThatCannotRunFail(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name, addon, version, config string
		resource                     string
		reasons                      []string
	}{
		{
			name: "image not on the node", addon: "kube-proxy", version: "v1.34.1-eksbuild.1", config: kubeProxyConfig,
			resource: "DaemonSet/kube-system/kube-proxy", reasons: []string{"ErrImagePull", "ImagePullBackOff"},
		},
		{
			name: "crash loop", addon: "coredns", version: corednsNew,
			config:   `{"corefile": ".:53 {\n    nosuchplugin\n}\n"}`,
			resource: "Deployment/kube-system/coredns", reasons: []string{"CrashLoopBackOff"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := e.ctx(failureGrace + 4*time.Minute)
			e.createAddon(ctx, tc.addon, tc.version, tc.config)
			a := e.waitStatus(ctx, tc.addon, types.AddonStatusCreateFailed, types.AddonStatusActive)
			if a.Status != types.AddonStatusCreateFailed {
				t.Fatalf("%s %s is %s, want CREATE_FAILED", tc.addon, tc.version, a.Status)
			}
			var found bool
			for _, is := range a.Health.Issues {
				msg := ""
				if is.Message != nil {
					msg = *is.Message
				}
				t.Logf("issue %s %v: %s", is.Code, is.ResourceIds, msg)
				if is.Code == types.AddonIssueCodeInsufficientNumberOfReplicas && slices.Contains(is.ResourceIds, tc.resource) &&
					slices.ContainsFunc(tc.reasons, func(r string) bool { return strings.Contains(msg, r) }) {
					found = true
				}
			}
			if !found {
				t.Errorf("no issue InsufficientNumberOfReplicas on %s naming %v", tc.resource, tc.reasons)
			}
			e.deleteAddon(ctx, tc.addon)
		})
	}
}
