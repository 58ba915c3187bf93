// Command demo runs the whole of Sluice on loopback and shows it working: `make demo`.
//
// It starts a control plane (kube-apiserver and etcd from the envtest binaries), redis-server,
// the manager (controller and webhook), creates two annotated pods that the webhook injects,
// runs their sidecars on a stand-in kubelet, applies the sample policies with kubectl, and
// drives traffic: a table per rule, a live policy edit, a Redis outage and its end. With
// --once it then stops; otherwise it keeps running for kubectl until Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/devenv"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/policy"
)

const (
	namespace = "demo"
	ruleFixed = "fixed"
)

func main() {
	once := flag.Bool("once", false, "stop after the scripted tour instead of waiting for Ctrl-C")
	verbose := flag.Bool("v", false, "show the sidecars' logs")
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *once, *verbose); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo: %v\n", err)
		os.Exit(1)
	}
}

type demo struct {
	sys     *devenv.System
	pods    []*devenv.Pod
	clients int
	out     io.Writer
}

func step(format string, args ...any) { fmt.Printf("\n==> "+format+"\n", args...) }

func run(ctx context.Context, once, verbose bool) error {
	start := time.Now()
	opts := devenv.Options{Progress: func(format string, args ...any) { fmt.Printf("  ... "+format+"\n", args...) }}
	if verbose {
		opts.ProcessLog = os.Stderr
	}
	step("Starting Sluice on loopback (no cluster, no Docker)")
	sys, err := devenv.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		step("Stopping every process the demo started")
		sys.Stop()
	}()
	d := &demo{sys: sys, out: os.Stdout}
	fmt.Printf("  KUBECONFIG=%s\n", sys.ControlPlane.Kubeconfig)
	fmt.Printf("  redis-server on %s; sidecar logs under %s\n", sys.Redis.Addr(), filepath.Join(sys.Dir, "pods"))

	if err := sys.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	step("kubectl apply -n %s -f config/samples/algorithms.yaml -f config/samples/shadow.yaml", namespace)
	fmt.Print(indent(d.kubectl("apply", "-n", namespace,
		"-f", filepath.Join(sys.Root, "config", "samples", "algorithms.yaml"),
		"-f", filepath.Join(sys.Root, "config", "samples", "shadow.yaml"))))

	step("Creating two pods annotated %s: \"true\"; the webhook injects the sidecar", inject.AnnotationInject)
	for i := range 2 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("demo-%d", i),
				Labels: map[string]string{"app": "demo"}, Annotations: map[string]string{inject.AnnotationInject: "true"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "sluice.local/upstream:dev",
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}},
		}
		p, err := sys.RunPod(ctx, pod, fmt.Sprintf("127.0.2.%d", i+1))
		if err != nil {
			return err
		}
		fmt.Printf("  %s: sidecar %s -> app 127.0.2.%d:8080, args %s\n", p.Name, p.URL, i+1, strings.Join(p.Args, " "))
		d.pods = append(d.pods, p)
	}
	if err := d.waitReplicas(ctx, "algorithms", 2); err != nil {
		return err
	}
	fmt.Print(indent(d.kubectl("get", "rlp", "-n", namespace)))

	step("Traffic: 8 requests per rule from one client, alternating between the two pods (shared Redis)")
	if err := d.table([]string{ruleFixed, "log", "counter", "bucket", "meter", "queue"}, d.pods); err != nil {
		return err
	}

	if err := d.envoy(ctx); err != nil {
		return err
	}

	step("Editing the policy live: rule 'fixed' from 5 to 2 per 10s")
	edited := time.Now()
	d.kubectl("patch", "rlp", "algorithms", "-n", namespace, "--type=json",
		"-p", `[{"op":"replace","path":"/spec/rules/0/limit","value":2}]`)
	if err := d.until(ctx, func() (bool, error) {
		rs, err := devenv.Send(d.client(), d.pods, 4, "/"+ruleFixed, nil)
		return devenv.Count(rs)[http.StatusOK] == 2, err
	}); err != nil {
		return err
	}
	fmt.Printf("  the sidecars enforced the edit %s after kubectl patch\n", time.Since(edited).Round(time.Millisecond))
	if err := d.table([]string{ruleFixed}, d.pods); err != nil {
		return err
	}

	step("Killing redis-server (kill -9): each sidecar falls back to its share by rank, the shares summing to the limit")
	if err := sys.KillRedis(); err != nil {
		return err
	}
	for _, p := range d.pods {
		fmt.Printf("  %s alone:\n", p.Name)
		if err := d.table([]string{ruleFixed, "bucket"}, []*devenv.Pod{p}); err != nil {
			return err
		}
	}

	step("Restarting redis-server: the sidecars' breakers close and counting is shared again")
	if err := sys.RestartRedis(); err != nil {
		return err
	}
	back := time.Now()
	if err := d.until(ctx, func() (bool, error) {
		rs, err := devenv.Send(d.client(), d.pods[:1], 6, "/bucket", nil)
		return devenv.Count(rs)[http.StatusOK] == 5, err
	}); err != nil {
		return err
	}
	fmt.Printf("  back on Redis %s after the restart\n", time.Since(back).Round(time.Millisecond))
	if err := d.table([]string{ruleFixed, "bucket"}, d.pods[:1]); err != nil {
		return err
	}

	step("Summary")
	fmt.Printf("  Control plane, manager, Redis and 2 injected sidecars ran on loopback; tour took %s.\n", time.Since(start).Round(time.Second))
	fmt.Printf("  Pods' applications served %d and %d requests; everything else was answered by the sidecars.\n",
		d.pods[0].App.Served(), d.pods[1].App.Served())
	if once {
		return nil
	}
	fmt.Printf("\nStill running. In another shell:\n  export KUBECONFIG=%s\n  kubectl get rlp -n %s\n  curl -i %s/bucket\nCtrl-C stops everything.\n",
		sys.ControlPlane.Kubeconfig, namespace, d.pods[0].URL)
	<-ctx.Done()
	return nil
}

// envoy applies the Envoy sample, starts the RLS server (cmd/ratelimit's wiring, in process)
// on the ConfigMap the controller renders for it, and asks it as Envoy would.
func (d *demo) envoy(ctx context.Context) error {
	step("kubectl apply -n %s -f config/samples/envoy.yaml: a policy for Envoy's domain edge", namespace)
	fmt.Print(indent(d.kubectl("apply", "-n", namespace, "-f", filepath.Join(d.sys.Root, "config", "samples", "envoy.yaml"))))
	file := filepath.Join(d.sys.Dir, "ratelimit", policy.DataKey)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	if err := d.until(ctx, func() (bool, error) {
		var cm corev1.ConfigMap
		if err := d.sys.Client.Get(ctx, types.NamespacedName{Namespace: devenv.RLSNamespace, Name: controller.RLSConfigMapName}, &cm); err != nil {
			return false, nil
		}
		data := cm.Data[policy.DataKey]
		if !strings.Contains(data, `"domain":"edge"`) {
			return false, nil
		}
		return true, os.WriteFile(file, []byte(data), 0o600)
	}); err != nil {
		return err
	}
	fmt.Printf("  rendered into ConfigMap %s/%s; the RLS server reads it from %s\n", devenv.RLSNamespace, controller.RLSConfigMapName, file)
	addr, err := devenv.StartRLS(ctx, file, d.sys.Redis.URL())
	if err != nil {
		return err
	}
	step("Envoy's RLS v3 call ShouldRateLimit to %s, 5 times for client 10.1.2.3 (limit 3 per minute)", addr)
	return devenv.ShowRLS(d.out, addr, "edge", [][2]string{{"generic_key", "checkout"}, {"remote_address", "10.1.2.3"}}, 5)
}

// client returns a client from a loopback address the limiter has not seen yet.
func (d *demo) client() *http.Client {
	d.clients++
	return devenv.ClientFrom(fmt.Sprintf("127.0.3.%d", d.clients))
}

func (d *demo) kubectl(args ...string) string {
	cmd := exec.Command(d.sys.ControlPlane.Kubectl(), append([]string{"--kubeconfig", d.sys.ControlPlane.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("kubectl %s failed: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// table sends 8 requests for each rule's path from a fresh client and prints the outcome and
// the headers of the last answer.
func (d *demo) table(rules []string, pods []*devenv.Pod) error {
	const n = 8
	w := tabwriter.NewWriter(d.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  rule\tsent\tallowed\tdenied\tdecisions\tlast answer's headers")
	for _, rule := range rules {
		rs, err := devenv.Send(d.client(), pods, n, "/"+rule, nil)
		if err != nil {
			return err
		}
		counts := devenv.Count(rs)
		var marks strings.Builder
		for _, r := range rs {
			switch {
			case r.Status == http.StatusOK && r.Elapsed > 50*time.Millisecond:
				fmt.Fprintf(&marks, "q%d ", r.Elapsed.Round(10*time.Millisecond).Milliseconds())
			case r.Status == http.StatusOK:
				marks.WriteString("+ ")
			default:
				fmt.Fprint(&marks, r.Status, " ")
			}
		}
		last := rs[len(rs)-1].Header
		fmt.Fprintf(w, "  %s\t%d\t%d\t%d\t%s\t%s\n", rule, n, counts[http.StatusOK], n-counts[http.StatusOK], strings.TrimSpace(marks.String()),
			headerLine(last))
	}
	return w.Flush()
}

func headerLine(h http.Header) string {
	var parts []string
	for _, k := range []string{"Ratelimit", "X-Ratelimit-Remaining", "Retry-After"} {
		if v := h.Get(k); v != "" {
			parts = append(parts, k+": "+v)
		}
	}
	return strings.Join(parts, "  ")
}

func (d *demo) waitReplicas(ctx context.Context, name string, n int32) error {
	return d.until(ctx, func() (bool, error) {
		var p v1alpha1.RateLimitPolicy
		err := d.sys.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &p)
		return err == nil && p.Status.MatchedPods == n, nil
	})
}

// until polls cond every 100ms for up to 30s.
func (d *demo) until(ctx context.Context, cond func() (bool, error)) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond()
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("condition not met within 30s")
	}
	return err
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}
