package engine

import "testing"

func TestWithPassword(t *testing.T) {
	tests := map[string]struct{ url, password, want string }{
		"no password given":          {"redis://r:6379/0", "", "redis://r:6379/0"},
		"password added":             {"redis://r:6379/0", "s3cret", "redis://:s3cret@r:6379/0"},
		"username kept":              {"rediss://app@r:6379/0", "p@ss", "rediss://app:p%40ss@r:6379/0"},
		"a password in the URL wins": {"redis://:inurl@r:6379", "env", "redis://:inurl@r:6379"},
		"cluster form":               {"redis+cluster://r:7000?addr=r2:7000", "pw", "redis+cluster://:pw@r:7000?addr=r2:7000"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := WithPassword(tc.url, tc.password)
			if err != nil || got != tc.want {
				t.Fatalf("WithPassword(%q, %q) = %q, %v; want %q", tc.url, tc.password, got, err, tc.want)
			}
		})
	}
	if _, err := WithPassword("redis://%zz", "pw"); err == nil {
		t.Fatal("an unparseable URL was accepted")
	}
}
