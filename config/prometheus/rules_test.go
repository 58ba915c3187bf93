// Package prometheus_test checks the Prometheus rules with promtool: their syntax and the unit
// tests of sluice-rules_test.yaml. test/prometheus runs the same rules in a real Prometheus.
package prometheus_test

import (
	"os/exec"
	"testing"
)

func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not on PATH: run hack/ensure-prometheus.sh (make prometheus)")
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}

func TestRulesCheck(t *testing.T) {
	promtool(t, "check", "rules", "sluice-rules.yaml")
}

func TestRulesUnitTests(t *testing.T) {
	promtool(t, "test", "rules", "sluice-rules_test.yaml")
}
