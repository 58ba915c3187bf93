// Package archtest holds the repository's import rules as tests (docs/architecture.md lists
// them): which packages may import which, and what each binary may link. It has no code.
package archtest
