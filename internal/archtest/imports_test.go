package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sluice-dev/sluice/"

// goList runs go list with args from the module's root and returns its output's fields.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// under reports whether pkg is prefix or one of the packages under it.
func under(pkg, prefix string) bool {
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

// TestBinariesLinkOnlyTheirSide: each binary links what its job needs and nothing of the other
// side. The sidecar reads a file, so neither the API types nor a Kubernetes client are linked
// into it; the RLS server has no HTTP proxy; the manager writes Redis URLs but never talks to
// Redis.
func TestBinariesLinkOnlyTheirSide(t *testing.T) {
	for _, tc := range []struct {
		binary string
		banned []string
	}{
		{"./sidecar", []string{module + "api", "sigs.k8s.io/controller-runtime", "k8s.io/client-go", "k8s.io/api"}},
		{"./cmd/ratelimit", []string{"github.com/valyala/fasthttp", module + "sidecar", module + "api", "sigs.k8s.io/controller-runtime", "k8s.io/client-go"}},
		{"./cmd/manager", []string{"github.com/redis/go-redis", module + "sidecar"}},
	} {
		deps := goList(t, "-deps", tc.binary)
		if len(deps) < 50 {
			t.Fatalf("go list -deps %s listed %d packages: %q", tc.binary, len(deps), deps)
		}
		for _, dep := range deps {
			for _, banned := range tc.banned {
				if under(dep, banned) {
					t.Errorf("%s links %s (banned: %s)", tc.binary, dep, banned)
				}
			}
		}
	}
}

// TestImportRules: nothing in internal/ imports sidecar/ (the data plane's core is
// internal/dataplane, shared by both front ends; only mains and benchmarks may use the proxy),
// and the sidecar imports of this module only the core, the rendered format, the injection
// contract, the limiters and the build's version. Its tests may also render a sample policy the
// way the controller does (policyfile, render), to run it through the real sidecar.
func TestImportRules(t *testing.T) {
	sidecarMay := []string{module + "internal/dataplane", module + "internal/policy", module + "internal/inject",
		module + "internal/limiter", module + "internal/testutil", module + "internal/version"}
	sidecarTestsMay := append(slices.Clone(sidecarMay), module+"internal/policyfile", module+"internal/render")
	for _, line := range goList(t, "-test", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...") {
		fields := strings.Fields(line)
		// -test lists a package's test variants as "pkg [pkg.test]": one field more.
		pkg, imps := fields[0], fields[1:]
		if strings.HasSuffix(pkg, ".test") {
			continue // a generated test main
		}
		may := sidecarMay
		if len(imps) > 0 && strings.HasPrefix(imps[0], "[") {
			imps = imps[1:]
			may = sidecarTestsMay
		}
		fromSidecar := under(pkg, module+"sidecar")
		for _, imp := range imps {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			switch {
			case under(pkg, module+"internal") && under(imp, module+"sidecar"):
				t.Errorf("%s imports %s: nothing in internal/ may import sidecar/", pkg, imp)
			case fromSidecar && !under(imp, module+"sidecar") && !anyUnder(imp, may):
				t.Errorf("%s imports %s; the sidecar may import %s", pkg, imp, strings.Join(may, ", "))
			}
		}
	}
}

func anyUnder(pkg string, prefixes []string) bool {
	for _, p := range prefixes {
		if under(pkg, p) {
			return true
		}
	}
	return false
}

// TestBinariesCarryTimeZones: calendar rules name IANA zones, and the images of the sidecar
// and of the RLS server (distroless/static) are not trusted to hold a time-zone database.
func TestBinariesCarryTimeZones(t *testing.T) {
	for _, pkg := range []string{"./sidecar", "./cmd/ratelimit"} {
		deps := goList(t, "-deps", pkg)
		found := false
		for _, d := range deps {
			found = found || d == "time/tzdata"
		}
		if !found {
			t.Errorf("the binary of %s does not embed time/tzdata", pkg)
		}
	}
}
