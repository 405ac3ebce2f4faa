package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eks/types"

	controlv1 "github.com/saltbush/saltbush/api/saltbush/control/v1"
	"github.com/saltbush/saltbush/server/servertest"
)

// burnEnv makes the test binary, re-executed, spin every core until it is
// killed (TestBurnCPU): load from another process, which the Go scheduler
// of the process under test cannot yield to or see.
const burnEnv = "SALTBUSH_FAULTS_BURN_CPU"

// TestBurnCPU is not a test: it is the body of the process burnCPU starts.
func TestBurnCPU(t *testing.T) {
	if os.Getenv(burnEnv) != "1" {
		t.Skip("the CPU burner of the contention tests; runs only as their child process")
	}
	for i := 0; i < 2*runtime.NumCPU(); i++ {
		go func() {
			x := uint64(0x9e3779b97f4a7c15)
			for {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}()
	}
	select {} // until killed
}

// burnCPU starts a process that saturates every core for the rest of the
// test, and reports at cleanup how much CPU it took (so a run shows the
// load was real).
func burnCPU(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBurnCPU$", "-test.count=1")
	cmd.Env = append(os.Environ(), burnEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the CPU burner: %v", err)
	}
	start := time.Now()
	t.Cleanup(func() {
		cpu := processCPU(cmd.Process.Pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Logf("CPU burner used %v of CPU in %v of wall time on %d cores", cpu, time.Since(start).Round(time.Millisecond), runtime.NumCPU())
	})
}

// processCPU is the user+system CPU time of pid from /proc (zero where
// /proc is missing: the figure is only logged).
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14, stime 15.
	rest := string(b)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// TestHotRecordWritersConvergeUnderLoad: with another process saturating
// every core, 60 concurrent writers of one cluster record through the
// control API and 45 through the façade (TagResource, each its own tag key;
// a resource holds at most 50 tags) all succeed. Their lost races are retried until each caller's deadline,
// with a pause that grows with contention, not for a fixed number of tries
// that a slow machine runs out of.
func TestHotRecordWritersConvergeUnderLoad(t *testing.T) {
	burnCPU(t)
	srv := servertest.Start(t)
	// The callers' deadline is the retry budget: generous, as a real
	// client's would be, and never reached on a machine that is merely
	// busy.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Throttled or slow answers are retried for as long as the deadline
	// allows: without the SDK's retry quota, which a busy machine's slow
	// answers drain ("retry quota exceeded") however much time is left.
	client := srv.EKS(t, func(o *eks.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.RateLimiter = ratelimit.None
			so.MaxAttempts = 1000
		})
	})
	out, err := client.CreateCluster(ctx, &eks.CreateClusterInput{
		Name: aws.String("hot"), RoleArn: aws.String("arn:aws:iam::000000000000:role/eks"),
		ResourcesVpcConfig: &types.VpcConfigRequest{},
	})
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(out.Cluster.Arn)
	control := controlv1.NewClusterControlServiceClient(srv.GRPC(t))
	ref := &controlv1.ClusterRef{AccountId: "000000000000", Name: "hot"}

	const writers, taggers = 60, 45
	var wg sync.WaitGroup
	errs := make(chan error, writers+taggers)
	start := make(chan struct{})
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := control.AddMember(ctx, &controlv1.AddMemberRequest{Cluster: ref, InstanceId: fmt.Sprintf("i-%02d", i)}); err != nil {
				errs <- fmt.Errorf("AddMember i-%02d: %w", i, err)
			}
		}()
	}
	for i := 0; i < taggers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := client.TagResource(ctx, &eks.TagResourceInput{
				ResourceArn: aws.String(arn), Tags: map[string]string{fmt.Sprintf("writer-%02d", i): "x"},
			}); err != nil {
				errs <- fmt.Errorf("TagResource writer-%02d: %w", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	info, err := control.GetCluster(ctx, &controlv1.GetClusterRequest{Cluster: ref})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(info.GetCluster().GetMembers()); got != writers {
		t.Errorf("members = %d, want %d", got, writers)
	}
	tags, err := client.ListTagsForResource(ctx, &eks.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < taggers; i++ {
		if _, ok := tags.Tags[fmt.Sprintf("writer-%02d", i)]; !ok {
			t.Errorf("tag writer-%02d missing: a write that was acknowledged was lost", i)
		}
	}
}
