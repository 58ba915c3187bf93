package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/policyfile"
	"github.com/sluice-dev/sluice/internal/testutil/markdown"
)

// docExample is a RateLimitPolicy shown in a document: a whole manifest, or a list of rules
// (a block that starts with "- name:"), which the test wraps in a policy selecting every pod.
// reject is the message kubectl prints after `is invalid: ` when the document shows the
// example rejected (a ```text block right after it that starts with `The RateLimitPolicy`).
type docExample struct {
	where  string
	yaml   string
	reject string
}

// docExamples reads every ```yaml block of README.md and docs/ that is a RateLimitPolicy or a
// list of its rules.
func docExamples() []docExample {
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	Expect(err).NotTo(HaveOccurred())
	files = append([]string{filepath.Join("..", "..", "README.md")}, files...)
	var out []docExample
	for _, f := range files {
		blocks, err := markdown.File(f)
		Expect(err).NotTo(HaveOccurred())
		for i, b := range blocks {
			if b.Lang != "yaml" {
				continue
			}
			ex := docExample{where: fmt.Sprintf("%s:%d", filepath.Base(f), b.Line)}
			trimmed := strings.TrimLeft(b.Text, " ")
			switch {
			case strings.Contains(b.Text, "kind: RateLimitPolicy"):
				ex.yaml = b.Text
			case strings.HasPrefix(trimmed, "- name:") && strings.Contains(b.Text, "algorithm:"):
				ex.yaml = "apiVersion: sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: rules}\nspec:\n  podSelector: {}\n  rules:\n" + indentTo(b.Text, "  ")
			default:
				continue
			}
			if i+1 < len(blocks) && blocks[i+1].Lang == "text" && strings.HasPrefix(blocks[i+1].Text, "The RateLimitPolicy") {
				_, msg, ok := strings.Cut(blocks[i+1].Text, " is invalid: ")
				Expect(ok).To(BeTrue(), "%s: a rejection shows kubectl's `is invalid: ` message", ex.where)
				ex.reject = strings.TrimSpace(msg)
			}
			out = append(out, ex)
		}
	}
	return out
}

// indentTo re-indents a YAML fragment so that its least indented lines start with prefix.
func indentTo(text, prefix string) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	least := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); least < 0 || n < least {
			least = n
		}
	}
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = prefix + l[least:]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

var _ = Describe("The documents' examples", func() {
	It("are accepted by the API server and sluicectl, or rejected with the message the text shows", func(ctx context.Context) {
		examples := docExamples()
		Expect(len(examples)).To(BeNumerically(">=", 5), "the README and docs/ show policies")
		for _, ex := range examples {
			By(ex.where)
			ns := newNamespace(ctx)
			var obj unstructured.Unstructured
			Expect(yaml.Unmarshal([]byte(ex.yaml), &obj.Object)).To(Succeed(), "%s:\n%s", ex.where, ex.yaml)
			obj.SetNamespace(ns)
			err := k8sClient.Create(ctx, &obj, client.FieldValidation("Strict"))
			_, offline := policyfile.Decode(bytes.NewReader([]byte(ex.yaml)), ex.where)
			if ex.reject == "" {
				Expect(err).NotTo(HaveOccurred(), "%s:\n%s", ex.where, ex.yaml)
				Expect(offline).NotTo(HaveOccurred(), "%s: sluicectl render rejects what the API server accepts", ex.where)
				continue
			}
			Expect(err).To(HaveOccurred(), "%s shows a rejection:\n%s", ex.where, ex.yaml)
			_, got, _ := strings.Cut(err.Error(), " is invalid: ")
			Expect(got).To(Equal(ex.reject), "%s: the API server's message differs from the text's", ex.where)
			Expect(offline).To(MatchError(HaveSuffix(ex.reject)), "%s: sluicectl render's message differs", ex.where)
		}
	})
})

var _ = Describe("The quickstart", func() {
	It("shows the policy it applies, config/samples/quickstart.yaml, as it is", func() {
		doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "quickstart.md"))
		Expect(err).NotTo(HaveOccurred())
		file, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "quickstart.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var body []string
		for _, l := range strings.Split(string(file), "\n") {
			if !strings.HasPrefix(l, "#") {
				body = append(body, l)
			}
		}
		Expect(string(doc)).To(ContainSubstring("```yaml\n" + strings.Join(body, "\n") + "```\n"))
	})
})
