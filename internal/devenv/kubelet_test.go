package devenv

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRewriteValue(t *testing.T) {
	mounts := map[string]string{"/etc/sluice": "/tmp/p/volumes/policies", "/etc/podinfo": "/tmp/p/volumes/podinfo"}
	tests := map[string]string{
		"--listen=:8081":                        "--listen=127.0.0.7:8081",
		":9090":                                 "127.0.0.7:9090",
		"--upstream=http://127.0.0.1:8080":      "--upstream=http://127.0.0.7:8080",
		"http://localhost:8080":                 "http://127.0.0.7:8080",
		"--config=/etc/sluice/policies.json":    "--config=/tmp/p/volumes/policies/policies.json",
		"/etc/podinfo/labels":                   "/tmp/p/volumes/podinfo/labels",
		"--redis-url=redis://127.0.0.1:40000/0": "--redis-url=redis://127.0.0.7:40000/0",
		"--redis-timeout=50ms":                  "--redis-timeout=50ms",
		"0.0.0.0:9090":                          "127.0.0.7:9090",
		"/etc/sluicey/other":                    "/tmp/p/volumes/policiesy/other",
	}
	for in, want := range tests {
		if got := rewriteValue(in, mounts, "127.0.0.7"); got != want {
			t.Errorf("rewriteValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAtomicDirSwapsDataLink(t *testing.T) {
	dir := t.TempDir()
	w := &atomicDir{dir: dir}
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := w.write(map[string][]byte{"policies.json": []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	first, _ := os.Readlink(filepath.Join(dir, "..data"))
	if got := read("policies.json"); got != "v1" {
		t.Fatalf("policies.json = %q", got)
	}
	if link, _ := os.Readlink(filepath.Join(dir, "policies.json")); link != filepath.Join("..data", "policies.json") {
		t.Fatalf("policies.json links to %q, want through ..data", link)
	}
	if err := w.write(map[string][]byte{"policies.json": []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	if got := read("policies.json"); got != "v2" {
		t.Fatalf("policies.json = %q after update", got)
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Fatalf("old version %s was not removed: %v", first, err)
	}
	if err := w.write(map[string][]byte{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "policies.json")); !os.IsNotExist(err) {
		t.Fatalf("policies.json should be gone once the ConfigMap is: %v", err)
	}
}

func TestPodFieldLabelsInKubeletFormat(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"tier": "web", "app": `a"b`}}}
	got, err := podField(pod, "metadata.labels", "127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	if want := "app=\"a\\\"b\"\ntier=\"web\""; got != want {
		t.Fatalf("labels = %q, want %q", got, want)
	}
}
