package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The offline sluicectl commands the docs show (render and simulate, which need no cluster)
// run as printed, from a directory holding the repository's docs/ and config/, and print what
// the comment line right after them says they print. The cluster commands (status, quota) run
// in the demo and in cmd/sluicectl's tests against envtest and redis-server.
func TestDocsSluicectlCommands(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "bin")
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "sluicectl"), filepath.Join(root, "cmd", "sluicectl")).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	work := t.TempDir()
	for _, d := range []string{"docs", "config"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(work, d)); err != nil {
			t.Fatal(err)
		}
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	offline := regexp.MustCompile(`^(?:go run \./cmd/)?sluicectl (render|simulate)\b`)
	ran := 0
	for _, f := range append(files, filepath.Join(root, "README.md")) {
		for _, block := range shellBlocks(t, f) {
			lines := strings.Split(block, "\n")
			for i := 0; i < len(lines); i++ {
				cmd := lines[i]
				for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
					i++
					cmd = strings.TrimSuffix(cmd, "\\") + " " + strings.TrimSpace(lines[i])
				}
				if !offline.MatchString(cmd) {
					continue
				}
				cmd = strings.Replace(cmd, "go run ./cmd/sluicectl", "sluicectl", 1)
				c := exec.Command("bash", "-c", cmd)
				c.Dir = work
				c.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
				out, err := c.CombinedOutput()
				ran++
				if err != nil {
					t.Errorf("%s: %s: %v\n%s", filepath.Base(f), cmd, err, out)
					continue
				}
				if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "# ") {
					if want := strings.TrimPrefix(lines[i+1], "# "); !strings.Contains(string(out), want) {
						t.Errorf("%s: %s prints\n%s\nwithout %q", filepath.Base(f), cmd, out, want)
					}
				}
			}
		}
	}
	if ran < 3 {
		t.Errorf("ran %d sluicectl commands from the docs", ran)
	}
}
