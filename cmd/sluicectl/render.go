package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policyfile"
	"github.com/sluice-dev/sluice/internal/render"
)

type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

// runRender implements `sluicectl render -f policy.yaml [-f another.yaml] [--replicas N |
// --pods NAME,NAME]`: it validates the policies as the API server would and prints the
// policies.json the controller would write for them, with N unnamed ready pods behind every
// policy (each holds floor(limit/N) while Redis is down), or with the ready pods named (each
// policy selecting all of them; each holds its ranked share, and the shares sum to the limit).
func runRender(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var files fileList
	fs.Var(&files, "f", "a file of RateLimitPolicy manifests (YAML or JSON; - for standard input); repeatable")
	replicas := fs.Int("replicas", 1, "unnamed ready pods assumed behind each policy (each holds floor(limit/N) locally)")
	pods := fs.String("pods", "", "names of the ready pods behind each policy, comma-separated, as the controller renders them (exact shares by rank); overrides --replicas")
	namespace := fs.String("namespace", "", "namespace of policies that do not name one (default \"default\")")
	pretty := fs.Bool("pretty", false, "indent policies.json for people (the controller writes it compact; readers accept both)")
	output := fs.String("o", "json", "json: policies.json as the controller writes it (when it is not compressed); configmap: the ConfigMap the controller would write, as YAML, encoding and all (without owner references)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if strayArgument(fs, stderr) {
		return 2
	}
	if len(files) == 0 || *replicas < 0 || *replicas > 1<<30 || (*output != "json" && *output != "configmap") {
		fmt.Fprintln(stderr, "usage: sluicectl render -f policy.yaml [-f another.yaml] [--replicas N | --pods NAME,NAME] [--namespace NS] [--pretty] [-o json|configmap]")
		return 2
	}
	policies, err := readPolicies(files)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl render: %v\n", err)
		return 1
	}
	ns, err := commonNamespace(policies, *namespace)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl render: %v\n", err)
		return 1
	}
	var behind render.Pods = render.FixedReplicas(*replicas)
	podsSet := false
	fs.Visit(func(f *flag.Flag) { podsSet = podsSet || f.Name == "pods" })
	if podsSet { // --pods= is no ready pod, as the controller renders it: every pod holds 0
		names := render.NamedPods{}
		for _, n := range strings.Split(*pods, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		behind = names
	}
	doc, payload, verdicts, err := render.BuildFit(ns, policies, behind, 0)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl render: %v\n", err)
		return 1
	}
	var rejected []error
	for _, p := range policies {
		if v := verdicts[p.Name]; v.Err != nil {
			rejected = append(rejected, fmt.Errorf("RateLimitPolicy %q is not accepted: %w", p.Name, v.Err))
		}
	}
	if len(rejected) > 0 {
		fmt.Fprintf(stderr, "sluicectl render: %v\n", errors.Join(rejected...))
		return 1
	}
	var data []byte
	switch {
	case *output == "configmap":
		data, err = yaml.Marshal(render.ConfigMap(ns, payload))
	case *pretty:
		data, err = policy.MarshalIndent(doc)
	default:
		data, err = policy.Marshal(doc)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl render: %v\n", err)
		return 1
	}
	_, _ = stdout.Write(data)
	return 0
}

func readPolicies(files []string) ([]v1alpha1.RateLimitPolicy, error) {
	var all []v1alpha1.RateLimitPolicy
	var errs []error
	for _, name := range files {
		r := io.Reader(os.Stdin)
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			defer func() { _ = f.Close() }()
			r = f
		}
		ps, err := policyfile.Decode(r, name)
		if err != nil {
			errs = append(errs, err)
		}
		all = append(all, ps...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	seen := map[string]bool{}
	for _, p := range all {
		if seen[p.Name] {
			return nil, fmt.Errorf("RateLimitPolicy %q is given twice", p.Name)
		}
		seen[p.Name] = true
	}
	return all, nil
}

// commonNamespace returns the one namespace of the policies: the controller renders one
// document per namespace.
func commonNamespace(policies []v1alpha1.RateLimitPolicy, fallback string) (string, error) {
	if fallback == "" {
		fallback = "default"
	}
	ns := ""
	for i := range policies {
		if policies[i].Namespace == "" {
			policies[i].Namespace = fallback
		}
		if ns != "" && policies[i].Namespace != ns {
			return "", fmt.Errorf("policies are in namespaces %q and %q; render one namespace at a time", ns, policies[i].Namespace)
		}
		ns = policies[i].Namespace
	}
	if ns == "" {
		ns = fallback
	}
	return ns, nil
}
