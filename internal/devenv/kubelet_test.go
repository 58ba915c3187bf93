package devenv

import (
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
