package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/convert"
)

// runConvert converts another rate limiter's configuration into RateLimitPolicies, printed
// as a YAML stream for kubectl apply; notes on what converted without effect go to stderr.
func runConvert(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "envoy-ratelimit" {
		fmt.Fprint(stderr, "usage: sluicectl convert envoy-ratelimit -f config.yaml [-f more.yaml] [--namespace NS] [--failure-mode Local|Open|Closed]\n")
		return 2
	}
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var in fileList
	fs.Var(&in, "f", "an envoyproxy/ratelimit configuration file (repeatable; - reads stdin)")
	ns := fs.String("namespace", "", "the policies' namespace (empty: kubectl apply -n decides)")
	fm := fs.String("failure-mode", "Local", "each policy's failureMode while Redis cannot decide: Local, Open or Closed")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if strayArgument(fs, stderr) {
		return 2
	}
	if len(in) == 0 {
		fmt.Fprintln(stderr, "sluicectl convert envoy-ratelimit: give at least one -f file")
		return 2
	}
	switch *fm {
	case "Local", "Open", "Closed":
	default:
		fmt.Fprintf(stderr, "sluicectl convert envoy-ratelimit: --failure-mode %q is not Local, Open or Closed\n", *fm)
		return 2
	}
	var src []convert.File
	for _, name := range in {
		var b []byte
		var err error
		if name == "-" {
			b, err = io.ReadAll(os.Stdin)
		} else {
			b, err = os.ReadFile(name)
		}
		if err != nil {
			fmt.Fprintln(stderr, "sluicectl convert envoy-ratelimit:", err)
			return 1
		}
		src = append(src, convert.File{Name: name, Content: b})
	}
	res, err := convert.EnvoyRatelimit(src, convert.Options{Namespace: *ns, FailureMode: v1alpha1.FailureMode(*fm)})
	if err != nil {
		fmt.Fprintln(stderr, "sluicectl convert envoy-ratelimit:", err)
		return 1
	}
	for _, n := range res.Notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	for i, p := range res.Policies {
		b, err := yaml.Marshal(struct {
			APIVersion string                       `json:"apiVersion"`
			Kind       string                       `json:"kind"`
			Metadata   map[string]string            `json:"metadata"`
			Spec       v1alpha1.RateLimitPolicySpec `json:"spec"`
		}{p.APIVersion, p.Kind, metadata(p), p.Spec})
		if err != nil {
			fmt.Fprintln(stderr, "sluicectl convert envoy-ratelimit:", err)
			return 1
		}
		if i > 0 {
			fmt.Fprintln(stdout, "---")
		}
		_, _ = stdout.Write(b)
	}
	return 0
}

func metadata(p v1alpha1.RateLimitPolicy) map[string]string {
	m := map[string]string{"name": p.Name}
	if p.Namespace != "" {
		m["namespace"] = p.Namespace
	}
	return m
}
