package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policyfile"
	"github.com/sluice-dev/sluice/internal/render"
	"github.com/sluice-dev/sluice/internal/testutil/redisserver"
)

// renderedSample renders config/samples/<name> as the controller renders it for one replica:
// the policies document a sidecar reads.
func renderedSample(t *testing.T, name string) []byte {
	t.Helper()
	f, err := os.Open("../config/samples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	policies, err := policyfile.Decode(f, name)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := render.Build("default", policies, render.FixedReplicas(1))
	data, err := policy.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// config/samples/tiered.yaml promises that a request without a plan gets the strictest limit:
// through the sidecar, requests without X-Plan (or with a plan that is none of the known ones)
// are limited to 10 a minute per client, while a known plan's keys still pass.
func TestTieredSampleLimitsRequestsWithoutAPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	data := renderedSample(t, "tiered.yaml")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	redis := redisserver.StartTest(t)
	s := startSidecarDoc(t, up.URL, data, "app=checkout", redis.URL())

	send := func(header map[string]string) int {
		t.Helper()
		return getStatus(t, s.URL()+"/checkout", header)
	}
	for i := range 10 {
		if code := send(nil); code != http.StatusOK {
			t.Fatalf("request %d without X-Plan: %d, want 200 (10 a minute)", i+1, code)
		}
	}
	if code := send(nil); code != http.StatusTooManyRequests {
		t.Errorf("11th request without X-Plan: %d, want 429", code)
	}
	if code := send(map[string]string{"X-Plan": "trial", "X-API-Key": "k1"}); code != http.StatusTooManyRequests {
		t.Errorf("request with an unknown plan from the same client: %d, want 429", code)
	}
	if code := send(map[string]string{"X-Plan": "pro", "X-API-Key": "k1"}); code != http.StatusOK {
		t.Errorf("request with plan pro: %d, want 200", code)
	}
}
