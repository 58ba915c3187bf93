// Package docs_test checks the commands docs/quickstart.md tells a user to run, short of running
// them on a cluster: each shell block is valid bash, every repository file it names exists, and
// every make target it names is one the Makefile has.
package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil/markdown"
)

// shellBlocks returns the text of the ```sh blocks of a Markdown file, in order.
func shellBlocks(t *testing.T, path string) []string {
	t.Helper()
	blocks, err := markdown.File(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range markdown.Of(blocks, "sh") {
		out = append(out, b.Text)
	}
	return out
}

func TestQuickstartCommands(t *testing.T) {
	root := filepath.Join("..", "..")
	blocks := shellBlocks(t, filepath.Join(root, "docs", "quickstart.md"))
	if len(blocks) < 8 {
		t.Fatalf("docs/quickstart.md has %d shell blocks", len(blocks))
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	paths := regexp.MustCompile(`(?:^|\s)((?:config|dist|cmd|hack)/[\w./-]*\w)`)
	targets := regexp.MustCompile(`(?m)^\s*make ([a-z][\w-]*)`)
	for i, b := range blocks {
		if out, err := exec.Command("bash", "-n", "-c", b).CombinedOutput(); err != nil {
			t.Errorf("block %d is not valid bash: %v\n%s\n%s", i+1, err, out, b)
		}
		for _, m := range paths.FindAllStringSubmatch(b, -1) {
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("block %d names %s, which does not exist", i+1, m[1])
			}
		}
		for _, m := range targets.FindAllStringSubmatch(b, -1) {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[1]) + `:`).Match(makefile) {
				t.Errorf("block %d runs make %s, which the Makefile lacks", i+1, m[1])
			}
		}
	}
}
