// Package prometheus_test runs a real Prometheus against Sluice on loopback (internal/devenv:
// envtest's API server, the manager, Redis and two injected pods whose sidecars are the built
// binary), sends traffic, takes Redis away, and checks that every query of the rules
// (config/prometheus) and of the dashboard (internal/dashboard) returns data, so that a renamed
// or dropped metric fails here. With SLUICE_DASHBOARD_PNG set (make plots) it runs a longer
// drive and renders the dashboard's panels from this Prometheus into that file.
package prometheus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/dashboard"
	"github.com/sluice-dev/sluice/internal/devenv"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/status"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

const (
	namespace = "shop"
	// The sidecars' metrics port of this test; the pods' addresses are chosen free at run time
	// (devenv.FreePodIP).
	metricsPort = "19090"
)

// drive is the traffic of one run: phases of steady load, Redis down in the middle.
type drive struct {
	healthy, outage, recovered time.Duration
}

func TestRulesAndDashboardQueriesReturnData(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole system and Prometheus")
	}
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not on PATH: run hack/ensure-prometheus.sh (make prometheus)")
	}
	png := os.Getenv("SLUICE_DASHBOARD_PNG")
	d := drive{healthy: 8 * time.Second, outage: 8 * time.Second, recovered: 4 * time.Second}
	if png != "" {
		d = drive{healthy: 90 * time.Second, outage: 60 * time.Second, recovered: 60 * time.Second}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	managerMetrics := "127.0.0.1:" + freePort(t)
	sys, err := devenv.Start(ctx, devenv.Options{MetricsAddr: managerMetrics, RedisTimeout: time.Second,
		Progress: func(format string, args ...any) { t.Logf(format, args...) }})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop()
	pods := startPods(ctx, t, sys)

	checkWideColumns(t, sys)
	prom := startPrometheus(t, promBin, managerMetrics, pods)
	start := time.Now()
	t.Logf("Prometheus at %s; driving traffic: %+v", prom, d)
	stop := sendTraffic(t, pods)
	time.Sleep(d.healthy)
	checkStatus(ctx, t, sys, false)
	if err := sys.KillRedis(); err != nil {
		t.Fatal(err)
	}
	outageAt := time.Now()
	t.Log("Redis killed")
	checkStatus(ctx, t, sys, true)
	// While Redis is down some alerts must go pending: the breaker opens, pods decide on their
	// share. Their `for` is longer than the test, so pending is what shows they would fire.
	waitAlerts(t, prom, proc.Patience, "SluiceBreakerOpen", "SluicePodsDecidingLocally", "SluiceRuleDenyingMuch")
	time.Sleep(time.Until(outageAt.Add(d.outage)))
	if err := sys.RestartRedis(); err != nil {
		t.Fatal(err)
	}
	backAt := time.Now()
	t.Log("Redis restarted")
	time.Sleep(d.recovered)
	stop()
	// Two more evaluations after the last traffic, so the recorded series include it.
	waitEvaluations(t, prom, time.Now(), 2)
	end := time.Now()

	checkQueries(t, prom)
	if png != "" {
		renderDashboard(t, prom, start, end, png, fmt.Sprintf(
			"Sluice on loopback: 2 pods, 3 clients at 8, 40 and 6 requests/s; Redis killed at %s, back at %s (Prometheus, 1 s scrapes)",
			outageAt.Sub(start).Round(time.Second), backAt.Sub(start).Round(time.Second)))
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

const policyYAML = `apiVersion: sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: shop}
spec:
  podSelector:
    matchLabels: {app: web}
  failureMode: Local
  rules:
  - name: per-client
    key: [{clientIP: {}}]
    algorithm: TokenBucket
    limit: 10
    window: 1s
  - name: search
    match: {pathPrefix: /search}
    key: [{clientIP: {}}]
    algorithm: SlidingWindowCounter
    limit: 3
    window: 1s
  - name: per-client-trial
    key: [{clientIP: {}}]
    algorithm: FixedWindow
    limit: 6
    window: 1s
    mode: Shadow
`

// startPods creates the namespace and policy and runs two injected pods.
func startPods(ctx context.Context, t *testing.T, sys *devenv.System) []*devenv.Pod {
	t.Helper()
	if err := sys.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	var p v1alpha1.RateLimitPolicy
	if err := yaml.UnmarshalStrict([]byte(policyYAML), &p); err != nil {
		t.Fatal(err)
	}
	p.Namespace = namespace
	if err := sys.Client.Create(ctx, &p); err != nil {
		t.Fatal(err)
	}
	var pods []*devenv.Pod
	for i := range 2 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: namespace, Name: fmt.Sprintf("web-%d", i), Labels: map[string]string{"app": "web"},
				Annotations: map[string]string{inject.AnnotationInject: "true", inject.AnnotationMetricsPort: metricsPort},
			},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: "sluice.local/upstream:dev", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			}}},
		}
		port, _ := strconv.Atoi(metricsPort)
		ip, err := devenv.FreePodIP(8080, port)
		if err != nil {
			t.Fatal(err)
		}
		rp, err := sys.RunPod(ctx, pod, ip)
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, rp)
	}
	// Wait until both sidecars enforce the policy: a burst from one client is partly denied.
	deadline := time.Now().Add(proc.Patience)
	c := devenv.ClientFrom("127.0.3.200")
	for {
		rs, err := devenv.Send(c, pods, 30, "/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if devenv.Count(rs)[http.StatusTooManyRequests] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sidecars did not enforce the policy within %s", proc.Patience)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return pods
}

// sendTraffic starts clients at steady rates until the returned function is called: one within
// the per-client limit, one far above it (most of its requests denied), one searching.
func sendTraffic(t *testing.T, pods []*devenv.Pod) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range []struct {
		ip, path  string
		perSecond int
	}{{"127.0.3.201", "/", 8}, {"127.0.3.202", "/", 40}, {"127.0.3.203", "/search?q=x", 6}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := devenv.ClientFrom(c.ip)
			tick := time.NewTicker(time.Second / time.Duration(c.perSecond))
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				// Errors are not the test's subject here (a restart of Redis may cost one).
				_, _ = devenv.Send(client, pods[i%len(pods):i%len(pods)+1], 1, c.path, nil)
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// startPrometheus runs prometheus on a free loopback port with the rules of config/prometheus,
// scraping both sidecars (with the namespace and pod labels a Kubernetes pod scrape would give)
// and the manager every second, and returns its base URL.
func startPrometheus(t *testing.T, bin, managerMetrics string, pods []*devenv.Pod) string {
	t.Helper()
	root, err := devenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var sidecars strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&sidecars, "  - targets: ['%s']\n    labels: {namespace: %s, pod: %s}\n", net.JoinHostPort(p.IP, metricsPort), namespace, p.Name)
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
- job_name: sluice-sidecars
  static_configs:
%s- job_name: sluice-manager
  static_configs:
  - targets: [%q]
`, filepath.Join(root, "config", "prometheus", "sluice-rules.yaml"), sidecars.String(), managerMetrics)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + freePort(t)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := proc.Own(exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", out)
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(proc.Patience)
	for {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within %s: %v", proc.Patience, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
	Values [][2]any          `json:"values"`
}

// query runs an instant query (or a range query when step > 0) and returns its vector or matrix.
func query(prom, expr string, start, end time.Time, step time.Duration) ([]sample, error) {
	v := url.Values{"query": {expr}}
	path := "/api/v1/query"
	if step > 0 {
		path = "/api/v1/query_range"
		v.Set("start", strconv.FormatInt(start.Unix(), 10))
		v.Set("end", strconv.FormatInt(end.Unix(), 10))
		v.Set("step", strconv.Itoa(int(step.Seconds())))
	}
	resp, err := http.Get(prom + path + "?" + v.Encode())
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status, Error string
		Data          struct {
			Result []sample `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %s", err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", expr, r.Error)
	}
	return r.Data.Result, nil
}

// waitEvaluations waits until every rule group of prom has been evaluated n times since after
// (at 1 s intervals: its last evaluation began n-1 s or more after after).
func waitEvaluations(t *testing.T, prom string, after time.Time, n int) {
	t.Helper()
	since := after.Add(time.Duration(n-1) * time.Second)
	deadline := time.Now().Add(proc.Patience)
	for {
		resp, err := http.Get(prom + "/api/v1/rules")
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Data struct {
				Groups []struct {
					Name           string    `json:"name"`
					LastEvaluation time.Time `json:"lastEvaluation"`
				} `json:"groups"`
			} `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		done := len(r.Data.Groups) > 0
		for _, g := range r.Data.Groups {
			done = done && g.LastEvaluation.After(since)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus did not evaluate its rules %d times after %s within %s: %+v", n, after, proc.Patience, r.Data.Groups)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitAlerts waits for each alert to be pending or firing; d bounds a hang.
func waitAlerts(t *testing.T, prom string, d time.Duration, names ...string) {
	t.Helper()
	deadline := time.Now().Add(d)
	seen := map[string]bool{}
	for {
		for _, n := range names {
			if seen[n] {
				continue
			}
			rs, err := query(prom, fmt.Sprintf(`ALERTS{alertname=%q, namespace=%q}`, n, namespace), time.Time{}, time.Time{}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) > 0 {
				seen[n] = true
				t.Logf("alert %s %s: %v", n, rs[0].Metric["alertstate"], rs[0].Metric)
			}
		}
		if len(seen) == len(names) {
			return
		}
		if time.Now().After(deadline) {
			var missing []string
			for _, n := range names {
				if !seen[n] {
					missing = append(missing, n)
				}
			}
			t.Fatalf("alerts never pending or firing while Redis was down: %v", missing)
		}
		time.Sleep(time.Second)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record string `json:"record"`
			Alert  string `json:"alert"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// metricName matches the metric and recorded-series names in an expression: Sluice's own
// (sluice_..., sluice:...) are the ones a rename would break.
var metricName = regexp.MustCompile(`\bsluice[_:][a-z0-9_:]*`)

// checkQueries fails for each recording rule whose series is empty, each alert whose
// expression names a series that is empty, and each dashboard query that returns nothing.
func checkQueries(t *testing.T, prom string) {
	t.Helper()
	root, err := devenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "sluice-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules ruleFile
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	nonEmpty := func(what, expr string) {
		t.Helper()
		rs, err := query(prom, expr, time.Time{}, time.Time{}, 0)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		if len(rs) == 0 {
			t.Errorf("%s: %s returned no data", what, expr)
			return
		}
		t.Logf("%s: %s: %d series", what, expr, len(rs))
	}
	recorded := map[string]bool{}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			switch {
			case r.Record != "":
				if !recorded[r.Record] {
					nonEmpty("recording rule", fmt.Sprintf(`%s{namespace=%q}`, r.Record, namespace))
				}
				recorded[r.Record] = true
				nonEmpty("recording rule "+r.Record+" expression", r.Expr)
			case r.Alert != "":
				alerts++
				names := metricName.FindAllString(r.Expr, -1)
				if len(names) == 0 {
					t.Errorf("alert %s reads no Sluice series: %s", r.Alert, r.Expr)
				}
				for _, n := range slices.Compact(slices.Sorted(slices.Values(names))) {
					nonEmpty("alert "+r.Alert, n)
				}
			}
		}
	}
	if len(recorded) == 0 || alerts == 0 {
		t.Fatalf("%d recorded series and %d alerts in the rules file", len(recorded), alerts)
	}
	for _, p := range dashboard.Panels() {
		for _, q := range p.Queries {
			nonEmpty("panel "+p.Title, dashboard.ForNamespace(q.Expr, namespace))
		}
	}
}

// renderDashboard draws the dashboard's panels over [start, end] from range queries.
func renderDashboard(t *testing.T, prom string, start, end time.Time, out, title string) {
	t.Helper()
	panels := dashboard.Panels()
	data := make([][]dashboard.Series, len(panels))
	for i, p := range panels {
		for _, q := range p.Queries {
			rs, err := query(prom, dashboard.ForNamespace(q.Expr, namespace), start, end, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				s := dashboard.Series{Name: dashboard.Legend(q.Legend, r.Metric)}
				for _, v := range r.Values {
					ts, _ := v[0].(float64)
					str, _ := v[1].(string)
					f, err := strconv.ParseFloat(str, 64)
					if err != nil {
						t.Fatalf("%s: value %v: %v", q.Expr, v[1], err)
					}
					s.Points = append(s.Points, dashboard.Point{T: time.Unix(int64(ts), 0).UTC(), V: f})
				}
				data[i] = append(data[i], s)
			}
		}
		slices.SortStableFunc(data[i], func(a, b dashboard.Series) int { return strings.Compare(a.Name, b.Name) })
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := dashboard.Render(f, title, panels, data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}

// checkWideColumns checks the columns kubectl get rlp -o wide adds for an incident, polling
// until they show (proc.Patience bounds a hang): the controller writes statuses with the ConfigMap, at most once per
// --render-interval, so the pods that just became ready may not be counted yet.
func checkWideColumns(t *testing.T, sys *devenv.System) {
	t.Helper()
	header := regexp.MustCompile(`^NAME\s+RULES\s+READY\s+PODS\s+DOMAIN\s+FAILURE MODE\s+BYPASSED BY\s+UNINJECTED\s+AGE$`)
	// No uninjected pods and no Service bypassing the sidecar: both columns are blank; no domain.
	row := regexp.MustCompile(`^shop\s+.*\s+True\s+2\s+Local\s+\S+$`)
	var out []byte
	for deadline := time.Now().Add(proc.Patience); ; time.Sleep(200 * time.Millisecond) {
		var err error
		out, err = exec.Command(sys.ControlPlane.Kubectl(), "--kubeconfig", sys.ControlPlane.Kubeconfig,
			"get", "rlp", "-n", namespace, "-o", "wide").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get rlp -o wide: %v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) == 2 && header.MatchString(lines[0]) && row.MatchString(lines[1]) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("kubectl get rlp -o wide printed:\n%s", out)
			return
		}
	}
	t.Logf("kubectl get rlp -o wide:\n%s", out)
}

// checkStatus runs sluicectl status's collection against the running sidecars, scraped
// directly: the API server of envtest cannot proxy to loopback pod addresses (see
// internal/status for the proxy path). While Redis is down both pods decide on their share.
func checkStatus(ctx context.Context, t *testing.T, sys *devenv.System, outage bool) {
	t.Helper()
	var policies v1alpha1.RateLimitPolicyList
	var pods corev1.PodList
	if err := sys.Client.List(ctx, &policies, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	if err := sys.Client.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	ps, targets, err := status.Targets(policies.Items, pods.Items)
	if err != nil {
		t.Fatal(err)
	}
	ips := map[string]string{}
	for _, p := range pods.Items {
		ips[p.Name] = p.Status.PodIP
	}
	direct := func(ctx context.Context, _ string, tg status.Target) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(ips[tg.Name], strconv.Itoa(int(tg.Port)))+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		return io.ReadAll(resp.Body)
	}
	rows, failed := status.Collect(ctx, namespace, ps, targets, direct, status.Options{Interval: 3 * time.Second})
	var out strings.Builder
	_ = status.Write(&out, rows)
	t.Logf("sluicectl status (outage %v):\n%s", outage, out.String())
	if len(failed) > 0 || len(rows) != 3 {
		t.Fatalf("status: %d rows, failures %v", len(rows), failed)
	}
	for _, r := range rows {
		if r.Pods != 2 || r.Scraped != 2 {
			t.Errorf("%s: %d of %d pods scraped, want 2 of 2", r.Rule, r.Scraped, r.Pods)
		}
		if outage && r.Local != 2 {
			t.Errorf("%s: %d pods on their local share while Redis is down, want 2", r.Rule, r.Local)
		}
		if !outage && r.Local != 0 {
			t.Errorf("%s: %d pods on their local share with Redis up, want 0", r.Rule, r.Local)
		}
		switch r.Rule {
		case "per-client": // 54 requests/s offered, 10/s per client allowed, the 40/s client mostly denied
			if r.Admitted < 10 || r.Denied < 10 {
				t.Errorf("per-client: %.1f admitted/s and %.1f denied/s, want at least 10 of each", r.Admitted, r.Denied)
			}
		case "per-client-trial": // Shadow: never denies, reports what 6/s would
			// Its would-be denials count only in requests per-client admits (a request denied
			// by one rule charges none), so a few per second, not the 40/s client's whole excess.
			if r.Denied != 0 || r.ShadowDenied < 1 {
				t.Errorf("per-client-trial: %.1f denied/s and %.1f shadow-denied/s", r.Denied, r.ShadowDenied)
			}
		}
	}
}
