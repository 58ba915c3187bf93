package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSidecarKnowsNothingOfTheAPIServer holds the import rules of ARCHITECTURE.md for the
// sidecar: it reads a file, so neither the API types nor a Kubernetes client are linked into
// it, and of this module it imports only the rendered format, the injection contract and the
// limiters.
func TestSidecarKnowsNothingOfTheAPIServer(t *testing.T) {
	const module = "github.com/sluice-dev/sluice/"
	out, err := exec.Command("go", "list", "-deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), deps)
	}
	for _, dep := range deps {
		for _, banned := range []string{module + "api/", "sigs.k8s.io/controller-runtime", "k8s.io/client-go/", "k8s.io/api/"} {
			if strings.HasPrefix(dep+"/", banned) {
				t.Errorf("the sidecar links %s", dep)
			}
		}
	}

	out, err = exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{
		module + "internal/policy": true, module + "internal/inject": true,
		module + "internal/limiter": true, module + "internal/limiter/redisstore": true,
		module + "internal/limiter/lease": true, // the leasing engine, pure limiter code
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			// sidecar/internal/sidecartest is test support, not the binary: it may use the
			// project's test utilities too.
			testSupport := fields[0] == module+"sidecar/internal/sidecartest" && strings.HasPrefix(imp, module+"internal/testutil/")
			if strings.HasPrefix(imp, module) && !strings.HasPrefix(imp, module+"sidecar/") && !allowed[imp] && !testSupport {
				t.Errorf("%s imports %s; the sidecar may import policy, inject, limiter, lease and redisstore", fields[0], imp)
			}
		}
	}
}

// TestBinariesCarryTimeZones: calendar rules name IANA zones, and the images of the sidecar
// and of the RLS server (distroless/static) are not trusted to hold a time-zone database.
func TestBinariesCarryTimeZones(t *testing.T) {
	for _, pkg := range []string{".", "../cmd/ratelimit"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		if !strings.Contains(" "+strings.ReplaceAll(string(out), "\n", " "), " time/tzdata ") {
			t.Errorf("the binary of %s does not embed time/tzdata", pkg)
		}
	}
}
