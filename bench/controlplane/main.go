// Command controlplane measures what a rolling update costs the control plane (issue 20): a
// real manager binary (cmd/manager, webhook off) against an envtest API server, 20 policies
// selecting the pods of one Deployment-like set, and a rolling update of its pods one at a time
// (create the new pod, mark it Ready, delete an old one). For each --render-interval given it
// reports the ConfigMap writes, the reconciles, the pod events and the manager's CPU time per
// pod event (utime+stime from /proc), all in one invocation so the intervals compare side by
// side.
//
//	go build -o bin/manager ./cmd/manager
//	KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh) go run ./bench/controlplane -manager bin/manager
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/envtestassets"
)

func main() {
	manager := flag.String("manager", "bin/manager", "The manager binary (go build ./cmd/manager).")
	pods := flag.Int("pods", 500, "Pods in the rolling update.")
	policies := flag.Int("policies", 20, "Policies selecting them.")
	surge := flag.Int("surge", 10, "Pods rolled at once.")
	intervals := flag.String("intervals", "0,1s", "Comma-separated --render-interval values to compare.")
	flag.Parse()
	if err := run(*manager, *pods, *policies, *surge, *intervals); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

type result struct {
	interval                  string
	podEvents, writes, reconc int
	cpu                       time.Duration
	elapsed                   time.Duration
}

func run(managerBin string, pods, policies, surge int, intervals string) error {
	assets, err := envtestassets.Dir()
	if err != nil {
		return err
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	user, err := env.AddUser(envtest.User{Name: "bench", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sluice-controlplane-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kubeconfig, 0o600); err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		return err
	}

	var results []result
	for i, iv := range strings.Split(intervals, ",") {
		r, err := rollingUpdate(c, managerBin, kcPath, fmt.Sprintf("rollout-%d", i), iv, pods, policies, surge)
		if err != nil {
			return fmt.Errorf("--render-interval=%s: %w", iv, err)
		}
		results = append(results, r)
	}
	fmt.Printf("Rolling update of %d pods matched by %d policies (%d pods at a time: create, Ready, delete an old one), envtest API server, manager binary, `go run ./bench/controlplane -pods %d -policies %d -surge %d -intervals %s`:\n\n",
		pods, policies, surge, pods, policies, surge, intervals)
	fmt.Println("| --render-interval | pod events | ConfigMap writes | reconciles | manager CPU | CPU per pod event | rollout time |")
	fmt.Println("|---|--:|--:|--:|--:|--:|--:|")
	for _, r := range results {
		fmt.Printf("| %s | %d | %d | %d | %.2f s | %.0f µs | %.1f s |\n", r.interval, r.podEvents, r.writes, r.reconc,
			r.cpu.Seconds(), float64(r.cpu.Microseconds())/float64(r.podEvents), r.elapsed.Seconds())
	}
	if len(results) > 1 {
		b, a := results[0], results[len(results)-1]
		fmt.Printf("\n%s vs %s: ConfigMap writes %.3fx, reconciles %.3fx, manager CPU per pod event %.3fx.\n",
			a.interval, b.interval, float64(a.writes)/float64(b.writes), float64(a.reconc)/float64(b.reconc), float64(a.cpu)/float64(b.cpu))
	}
	return nil
}

// rollingUpdate starts a manager with the interval, sets up a namespace of ready pods and
// policies, waits until it is rendered, then rolls every pod and counts until the ConfigMap
// lists exactly the new pods and the manager has settled.
func rollingUpdate(c client.WithWatch, managerBin, kubeconfig, ns, interval string, pods, policies, surge int) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	r := result{interval: interval}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return r, err
	}
	labels := map[string]string{"app": "web"}
	for i := range policies {
		p := &v1alpha1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p%02d", i)},
			Spec: v1alpha1.RateLimitPolicySpec{
				PodSelector: &metav1.LabelSelector{MatchLabels: labels},
				Rules: []v1alpha1.Rule{{
					Name: fmt.Sprintf("p%02d-per-client", i), Key: []v1alpha1.KeyPart{{ClientIP: &v1alpha1.ClientIPKey{}}},
					Algorithm: v1alpha1.TokenBucket, Limit: int64(100 + i), Window: "1s",
				}},
			},
		}
		if err := c.Create(ctx, p); err != nil {
			return r, err
		}
	}
	var podEvents atomic.Int64
	newPod := func(name string) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}},
				TerminationGracePeriodSeconds: ptr.To[int64](0)},
		}
		if err := c.Create(ctx, p); err != nil {
			return err
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		podEvents.Add(2)
		return c.Status().Update(ctx, p)
	}
	for i := range pods {
		if err := newPod(fmt.Sprintf("old-%03d", i)); err != nil {
			return r, err
		}
	}

	port, err := freePort()
	if err != nil {
		return r, err
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	cmd := exec.CommandContext(ctx, managerBin, "--webhook=false", "--kubeconfig="+kubeconfig,
		"--metrics-bind-address="+fmt.Sprintf("127.0.0.1:%d", port), "--health-probe-bind-address=0",
		"--metrics-secure=false", "--render-interval="+interval, "--zap-log-level=error")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	want := func(prefix string) func(*policy.Document) bool {
		return func(d *policy.Document) bool {
			if len(d.Policies) != policies {
				return false
			}
			for _, p := range d.Policies {
				if len(p.Pods) != pods {
					return false
				}
				for _, name := range p.Pods {
					if !strings.HasPrefix(name, prefix) {
						return false
					}
				}
			}
			return true
		}
	}
	if err := waitFor(ctx, c, ns, want("old-")); err != nil {
		return r, fmt.Errorf("initial render: %w", err)
	}
	if err := settle(ctx, metricsURL); err != nil {
		return r, err
	}

	w, err := c.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
	if err != nil {
		return r, err
	}
	defer w.Stop()
	writes := make(chan int, 1)
	go func() {
		n := 0
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified || ev.Type == watch.Added {
				n++
			}
		}
		writes <- n
	}()
	reconc0, err := reconciles(metricsURL)
	if err != nil {
		return r, err
	}
	cpu0, err := cpuTime(cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	start := time.Now()
	podEvents.Store(0)
	// surge pods roll at once, like a Deployment's maxSurge: events come faster than a
	// reconcile that patches 20 statuses takes, as in a large rollout.
	work := make(chan int)
	errs := make(chan error, surge)
	for range surge {
		go func() {
			for i := range work {
				if err := newPod(fmt.Sprintf("new-%03d", i)); err != nil {
					errs <- err
					return
				}
				if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("old-%03d", i)}},
					client.GracePeriodSeconds(0)); err != nil {
					errs <- err
					return
				}
				podEvents.Add(1)
			}
			errs <- nil
		}()
	}
	for i := range pods {
		work <- i
	}
	close(work)
	for range surge {
		if err := <-errs; err != nil {
			return r, err
		}
	}
	if err := waitFor(ctx, c, ns, want("new-")); err != nil {
		return r, fmt.Errorf("final render: %w", err)
	}
	r.elapsed = time.Since(start)
	if err := settle(ctx, metricsURL); err != nil {
		return r, err
	}
	reconc1, err := reconciles(metricsURL)
	if err != nil {
		return r, err
	}
	cpu1, err := cpuTime(cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	w.Stop()
	r.podEvents, r.reconc, r.cpu, r.writes = int(podEvents.Load()), reconc1-reconc0, cpu1-cpu0, <-writes
	return r, nil
}

// waitFor polls the namespace's ConfigMap until ok holds for its document.
func waitFor(ctx context.Context, c client.Client, ns string, ok func(*policy.Document) bool) error {
	for {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: policy.ConfigMapName}, &cm); err == nil {
			if d, err := policy.Decode([]byte(cm.Data[policy.DataKey]), cm.BinaryData[policy.CompressedKey]); err == nil && ok(d) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// settle waits until the manager's reconcile count has not moved for 3 seconds (longer than
// any interval compared), so that held-back writes are counted.
func settle(ctx context.Context, metricsURL string) error {
	last, stable := -1, 0
	for stable < 6 {
		n, err := reconciles(metricsURL)
		if err != nil {
			n = -2 // not serving yet
		}
		if n == last {
			stable++
		} else {
			last, stable = n, 0
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}

var reconcileLine = regexp.MustCompile(`^controller_runtime_reconcile_total\{controller="ratelimitpolicy",result="[a-z_]+"\} (\d+)`)

// reconciles sums the manager's controller_runtime_reconcile_total over its results.
func reconciles(metricsURL string) (int, error) {
	resp, err := http.Get(metricsURL) //nolint:noctx,gosec // loopback, the bench's own manager
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	sum, seen := 0, false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if m := reconcileLine.FindStringSubmatch(sc.Text()); m != nil {
			n, _ := strconv.Atoi(m[1])
			sum, seen = sum+n, true
		}
	}
	if !seen {
		return 0, errors.New("no controller_runtime_reconcile_total for ratelimitpolicy yet")
	}
	return sum, sc.Err()
}

// cpuTime is a process's user plus system CPU time from /proc/PID/stat (clock ticks of 10 ms).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is parenthesised and may hold spaces: count from after it.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}
