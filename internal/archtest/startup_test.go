package archtest

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

// TestStartupRefusesBadArguments runs each binary with a stray argument, an unknown flag and
// contradictory flags: each must exit non-zero at once, naming the argument or flag, rather
// than start with part of its command line ignored (Go's flag package stops at the first
// argument that is not a flag, so `--listen :8081 stray --config x` used to drop --config).
func TestStartupRefusesBadArguments(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary")
	}
	bin := t.TempDir()
	binaries := []string{"./sidecar", "./cmd/ratelimit", "./cmd/manager", "./cmd/sluicectl"}
	build := exec.Command("go", append([]string{"build", "-o", bin + "/"}, binaries...)...)
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name, binary string
		args         []string
		want         string // in stderr
	}{
		{"sidecar stray word", "sidecar", []string{"--listen", ":18081", "stray", "--config", "/etc/x.json"}, `unexpected argument "stray"`},
		{"sidecar unknown flag", "sidecar", []string{"--no-such-flag"}, "no-such-flag"},
		{"sidecar one address twice", "sidecar", []string{"--listen", "127.0.0.1:18081", "--metrics-listen", "127.0.0.1:18081"}, "--listen and --metrics-listen"},
		{"sidecar cooldowns", "sidecar", []string{"--breaker-cooldown", "10s", "--breaker-max-cooldown", "1s"}, "--breaker-max-cooldown"},
		{"ratelimit stray word", "ratelimit", []string{"stray", "--redis-url", "redis://x"}, `unexpected argument "stray"`},
		{"ratelimit unknown flag", "ratelimit", []string{"--upstream", "http://x"}, "upstream"},
		{"ratelimit one address twice", "ratelimit", []string{"--grpc-listen", ":18082", "--metrics-listen", ":18082"}, "--grpc-listen and --metrics-listen"},
		{"manager stray word", "manager", []string{"--leader-elect", "stray", "--webhook=false"}, `unexpected argument "stray"`},
		{"manager unknown flag", "manager", []string{"--no-such-flag"}, "no-such-flag"},
		{"manager certificate for plain HTTP", "manager", []string{"--metrics-secure=false", "--metrics-cert-dir", "/tmp/x"}, "--metrics-cert-dir"},
		{"sluicectl render stray word", "sluicectl", []string{"render", "-f", "p.yaml", "stray"}, `unexpected argument "stray"`},
		{"sluicectl status stray word", "sluicectl", []string{"status", "stray"}, `unexpected argument "stray"`},
		{"sluicectl quota stray word", "sluicectl", []string{"quota", "get", "--policy", "p", "stray"}, `unexpected argument "stray"`},
		{"sluicectl unknown flag", "sluicectl", []string{"render", "--no-such-flag"}, "no-such-flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, tc.binary), tc.args...)
			// No SLUICE_ variable or kubeconfig of the machine may change the outcome.
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "KUBECONFIG=/nonexistent"}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			proc.Own(cmd)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				var exit *exec.ExitError
				if !errors.As(err, &exit) {
					t.Fatalf("%s %q exited 0, want a refusal; stderr:\n%s", tc.binary, tc.args, stderr.String())
				}
			case <-time.After(proc.Patience):
				_ = cmd.Process.Kill()
				err := <-done
				t.Fatalf("%s %q started instead of refusing its arguments (killed: %v); stderr:\n%s", tc.binary, tc.args, err, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("%s %q: stderr does not name %q:\n%s", tc.binary, tc.args, tc.want, stderr.String())
			}
		})
	}
}
