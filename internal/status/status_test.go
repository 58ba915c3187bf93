package status_test

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/dataplane/metrics"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/status"
)

// exposition returns what a sidecar with these metrics serves on /metrics.
func exposition(t *testing.T, m *metrics.Metrics) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	m.AdminHandler(func() error { return nil }, false).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.Bytes()
}

func parse(t *testing.T, m *metrics.Metrics, at time.Time) status.Scrape {
	t.Helper()
	s, err := status.ParseScrape(bytes.NewReader(exposition(t, m)), at)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var t0 = time.Date(2026, 2, 5, 12, 0, 0, 0, time.UTC)

func TestSummarizeTwoPods(t *testing.T) {
	web0, web1 := metrics.New(), metrics.New()
	r0, r1 := web0.ForRule("api", "per-client"), web1.ForRule("api", "per-client")
	s0, s1 := web0.ForRule("api", "search"), web1.ForRule("api", "search")
	f0 := web0.ForPolicy("api")
	web1.ForPolicy("api")
	other := web0.ForRule("other", "per-client") // another policy's rule of the same name
	r0.Allowed.Add(100)
	r1.Allowed.Add(50)
	r0.Denied.Add(7)
	before := map[string]status.Scrape{"web-0": parse(t, web0, t0), "web-1": parse(t, web1, t0)}

	// Over 5 s: web-0 admits 40 and denies 10 on Redis, then Redis goes and it decides 5 on its
	// share; web-1 admits 20 and shadow-denies 5; search sees 3 denials; the other policy 99.
	r0.Allowed.Add(40)
	r0.Denied.Add(10)
	f0.Local.Add(5)
	r1.Allowed.Add(20)
	r1.ShadowDenied.Add(5)
	s1.Denied.Add(3)
	_ = s0
	other.Allowed.Add(99)
	web0.BreakerState.Set(2)
	after := map[string]status.Scrape{"web-0": parse(t, web0, t0.Add(5*time.Second)), "web-1": parse(t, web1, t0.Add(5*time.Second))}

	policies := []status.Policy{{Name: "api", FailureMode: "Local", Rules: []string{"per-client", "search"}, Pods: []string{"web-0", "web-1", "web-2"}}}
	rows := status.Summarize(policies, before, after)
	want := []status.Row{
		{Policy: "api", Rule: "per-client", Admitted: 12, Denied: 2, ShadowDenied: 1, Scraped: 2, Pods: 3, Local: 1, BreakerOpen: 1, FailureMode: "Local"},
		{Policy: "api", Rule: "search", Denied: 0.6, Scraped: 2, Pods: 3, Local: 1, BreakerOpen: 1, FailureMode: "Local"},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v", rows)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, rows[i], want[i])
		}
	}
	var out strings.Builder
	if err := status.Write(&out, rows); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"POLICY  RULE        ADMITTED/S  DENIED/S  SHADOW-DENIED/S  PODS  LOCAL SHARE  BREAKER OPEN  FAILURE MODE",
		"api     per-client  12.0        2.0       1.0              2/3   1            1             Local",
		"api     search      0.0         0.6       0.0              2/3   1            1             Local",
	} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
}

// An adaptive rule's row shows what it shed: as denied when it enforces, as shadow-denied in
// mode Shadow, and no admitted figure (the sidecar counts none for it).
func TestSummarizeAdaptive(t *testing.T) {
	web0, web1 := metrics.New(), metrics.New()
	_, guard0 := web0.Adaptive("api", "guard")
	_, guard1 := web1.Adaptive("api", "guard")
	_, trial0 := web0.Adaptive("api", "trial")
	_, other := web0.Adaptive("other", "guard") // another policy's rule of the same name
	guard0.Add(3)
	before := map[string]status.Scrape{"web-0": parse(t, web0, t0), "web-1": parse(t, web1, t0)}
	guard0.Add(10)
	guard1.Add(5)
	trial0.Add(4)
	other.Add(100)
	after := map[string]status.Scrape{"web-0": parse(t, web0, t0.Add(5*time.Second)), "web-1": parse(t, web1, t0.Add(5*time.Second))}

	policies := []status.Policy{{Name: "api", FailureMode: "Local", Rules: []string{"guard", "trial"}, Pods: []string{"web-0", "web-1"},
		Adaptive: map[string]bool{"guard": false, "trial": true}}}
	rows := status.Summarize(policies, before, after)
	want := []status.Row{
		{Policy: "api", Rule: "guard", Denied: 3, Scraped: 2, Pods: 2, FailureMode: "Local", Adaptive: true},
		{Policy: "api", Rule: "trial", ShadowDenied: 0.8, Scraped: 2, Pods: 2, FailureMode: "Local", Adaptive: true},
	}
	if len(rows) != len(want) || rows[0] != want[0] || rows[1] != want[1] {
		t.Fatalf("rows\n got %+v\nwant %+v", rows, want)
	}
	var out strings.Builder
	if err := status.Write(&out, rows); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"api     guard  -           3.0       0.0              2/2   0            0             Local",
		"api     trial  -           0.0       0.8              2/2   0            0             Local",
	} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
}

// A sidecar that restarted between the scrapes counts from zero, as Prometheus' rate does.
func TestSummarizeCounterReset(t *testing.T) {
	old, restarted := metrics.New(), metrics.New()
	old.ForRule("api", "r").Allowed.Add(1000)
	restarted.ForRule("api", "r").Allowed.Add(30)
	rows := status.Summarize([]status.Policy{{Name: "api", Rules: []string{"r"}, Pods: []string{"p"}}},
		map[string]status.Scrape{"p": parse(t, old, t0)}, map[string]status.Scrape{"p": parse(t, restarted, t0.Add(10*time.Second))})
	if rows[0].Admitted != 3 || rows[0].Scraped != 1 {
		t.Errorf("row %+v, want 3 admitted/s from 1 pod", rows[0])
	}
}

func TestParseScrapeRejectsGarbage(t *testing.T) {
	if _, err := status.ParseScrape(strings.NewReader("sluice_requests_total{policy=\"a\" 1\n"), t0); err == nil {
		t.Error("parsed a broken exposition")
	}
}

func TestCollect(t *testing.T) {
	m := metrics.New()
	rule := m.ForRule("api", "r")
	clk := clocktesting.NewFakeClock(t0)
	scrapes := 0
	scrape := func(_ context.Context, ns string, tg status.Target) ([]byte, error) {
		if ns != "shop" {
			t.Errorf("scraped namespace %q", ns)
		}
		if tg.Name == "broken" {
			return nil, errors.New("no route")
		}
		scrapes++
		return exposition(t, m), nil
	}
	type result struct {
		rows   []status.Row
		failed map[string]error
	}
	done := make(chan result)
	policies := []status.Policy{{Name: "api", Rules: []string{"r"}, Pods: []string{"web-0", "broken"}}}
	go func() {
		rows, failed := status.Collect(context.Background(), "shop", policies,
			[]status.Target{{Name: "broken", Port: 9090}, {Name: "web-0", Port: 9090}}, scrape, status.Options{Interval: 2 * time.Second, Clock: clk})
		done <- result{rows, failed}
	}()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond) // the goroutine reaches its wait; the clock itself is fake
	}
	rule.Denied.Add(8)
	clk.Step(2 * time.Second)
	r := <-done
	if scrapes != 2 || len(r.failed) != 1 || r.failed["broken"] == nil {
		t.Fatalf("%d scrapes, failures %v", scrapes, r.failed)
	}
	if got := r.rows[0]; got.Denied != 4 || got.Scraped != 1 || got.Pods != 2 {
		t.Errorf("row %+v, want 4 denied/s from 1 of 2 pods", got)
	}
}

func TestTargets(t *testing.T) {
	injected := func(name string, labels map[string]string, phase corev1.PodPhase) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: inject.ContainerName, RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways),
					Ports: []corev1.ContainerPort{{Name: inject.MetricsPortName, ContainerPort: 9191}}}},
				Containers: []corev1.Container{{Name: "app"}},
			},
			Status: corev1.PodStatus{Phase: phase},
		}
	}
	plain := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	pods := []corev1.Pod{
		injected("web-1", map[string]string{"app": "web"}, corev1.PodRunning),
		injected("web-0", map[string]string{"app": "web"}, corev1.PodRunning),
		injected("web-pending", map[string]string{"app": "web"}, corev1.PodPending),
		injected("db-0", map[string]string{"app": "db"}, corev1.PodRunning),
		plain,
	}
	policies := []v1alpha1.RateLimitPolicy{{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1alpha1.RateLimitPolicySpec{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			FailureMode: v1alpha1.FailureLocal, Rules: []v1alpha1.Rule{{Name: "b"}, {Name: "a"},
				{Name: "guard", Adaptive: &v1alpha1.AdaptiveSpec{}}, {Name: "trial", Adaptive: &v1alpha1.AdaptiveSpec{}, Mode: v1alpha1.Shadow}}},
	}}
	ps, targets, err := status.Targets(policies, pods)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || strings.Join(ps[0].Pods, ",") != "web-1,web-0" || strings.Join(ps[0].Rules, ",") != "a,b,guard,trial" || ps[0].FailureMode != "Local" ||
		len(ps[0].Adaptive) != 2 || ps[0].Adaptive["guard"] || !ps[0].Adaptive["trial"] {
		t.Errorf("policies %+v", ps)
	}
	if len(targets) != 2 || targets[0] != (status.Target{Name: "web-0", Port: 9191}) || targets[1].Name != "web-1" {
		t.Errorf("targets %+v", targets)
	}
}

func ptrTo[T any](v T) *T { return &v }
