package kubeletdir

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteSwapsDataLink(t *testing.T) {
	dir := t.TempDir()
	w := New(dir)
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := w.Write(map[string][]byte{"policies.json": []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	first, _ := os.Readlink(filepath.Join(dir, "..data"))
	if got := read("policies.json"); got != "v1" {
		t.Fatalf("policies.json = %q", got)
	}
	if link, _ := os.Readlink(filepath.Join(dir, "policies.json")); link != filepath.Join("..data", "policies.json") {
		t.Fatalf("policies.json links to %q, want through ..data", link)
	}
	if err := w.Write(map[string][]byte{"policies.json": []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	if got := read("policies.json"); got != "v2" {
		t.Fatalf("policies.json = %q after update", got)
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Fatalf("old version %s was not removed: %v", first, err)
	}
	if err := w.Write(map[string][]byte{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "policies.json")); !os.IsNotExist(err) {
		t.Fatalf("policies.json should be gone once the ConfigMap is: %v", err)
	}
}
