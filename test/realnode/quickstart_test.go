//go:build realnode

package realnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/markdown"
	"github.com/sluice-dev/sluice/internal/testutil/proc"
)

// quickstartBound stops a hung quickstart; a run takes a few minutes (images, rollouts).
const quickstartBound = 30 * time.Minute

// TestQuickstart runs docs/quickstart.md as a user does, on a cluster where Sluice is not
// installed yet: every ```sh block as printed, in order, in one bash (set -e: a failing command
// fails the test), with what the page asks the reader to provide: REGISTRY (the node's
// registry), kubectl and helm on PATH pointed at the cluster, and git, whose url.insteadOf
// sends the page's clone URL to this repository, so that the clone is this commit. It then
// checks that the fifteen answers are the ones the page prints. The page's last block removes
// everything it installed, so the suite that follows starts from the same cluster.
func TestQuickstart(t *testing.T) {
	registry := os.Getenv("SLUICE_REALNODE_REGISTRY")
	if kubeconfig == "" || kubectlBin == "" || registry == "" {
		t.Skip("no node: run `make test-realnode` (hack/realnode/test.sh), which brings one up and sets SLUICE_REALNODE_*")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(root, "docs", "quickstart.md")
	blocks, err := markdown.File(page)
	if err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	for i, b := range markdown.Of(blocks, "sh") {
		fmt.Fprintf(&script, "echo '=== quickstart: block %d (docs/quickstart.md:%d)' >&2\nset -x\n%sset +x\n", i+1, b.Line, b.Text)
	}
	answers := expectedAnswers(t, blocks)

	// kubectl (the node's) and helm (the Makefile's pinned one) on PATH.
	tools := t.TempDir()
	if out, err := exec.Command("make", "-C", root, "-s", "helm").CombinedOutput(); err != nil {
		t.Fatalf("make helm: %v\n%s", err, out)
	}
	for name, target := range map[string]string{"kubectl": kubectlBin, "helm": filepath.Join(root, "bin", "helm")} {
		if err := os.Symlink(target, filepath.Join(tools, name)); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), quickstartBound)
	defer cancel()
	cmd := proc.Own(exec.CommandContext(ctx, "bash", "-c", script.String()))
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(),
		"PATH="+tools+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+kubeconfig,
		"REGISTRY="+registry+"/sluice",
		"GIT_CONFIG_COUNT=1",
		"GIT_CONFIG_KEY_0=url."+root+".insteadOf",
		"GIT_CONFIG_VALUE_0=https://github.com/sluice-dev/sluice.git",
	)
	log, err := os.Create(filepath.Join(os.TempDir(), "sluice-quickstart.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = log.Close() }()
	var stdout bytes.Buffer
	cmd.Stdout = io.MultiWriter(&stdout, log)
	cmd.Stderr = log
	start := time.Now()
	err = cmd.Run()
	// The page's port-forward runs in the background of the script: whatever the script left
	// running goes with its process group.
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	t.Logf("quickstart ran in %s; its output is in %s", time.Since(start).Round(time.Second), log.Name())
	if err != nil {
		tail, _ := exec.Command("tail", "-n", "60", log.Name()).Output()
		t.Fatalf("docs/quickstart.md failed: %v\n... last lines of %s:\n%s", err, log.Name(), tail)
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if strings.TrimSpace(line) == answers {
			return
		}
	}
	t.Errorf("the page prints the answers\n  %s\nbut the commands printed:\n%s", answers, stdout.String())
}

// expectedAnswers is the ```text block the page shows for the fifteen requests: the first
// text block made only of status codes.
func expectedAnswers(t *testing.T, blocks []markdown.Block) string {
	t.Helper()
	codes := regexp.MustCompile(`^(\d{3} )+\d{3}\n$`)
	for _, b := range markdown.Of(blocks, "text") {
		if codes.MatchString(b.Text) {
			return strings.TrimSuffix(b.Text, "\n")
		}
	}
	t.Fatal("docs/quickstart.md shows no ```text block of status codes")
	return ""
}
