package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Binary is a program that black-box tests run: the main package in the test's directory,
// built once per test process the first time Path is called. Its zero value with Name set is
// ready to use; TestMain calls Remove after the tests.
type Binary struct {
	// Name is the file name of the built program.
	Name string

	once sync.Once
	dir  string
	path string
	err  error
}

// Path builds the program if it has not been built yet and returns its path; a failed build
// fails t, with the compiler's output.
func (b *Binary) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", b.Name+"-test-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, b.Name)
		if out, err := exec.Command("go", "build", "-o", b.path, ".").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Remove deletes the built program, if any.
func (b *Binary) Remove() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}
