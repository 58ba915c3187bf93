package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
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
// --pods NAME,NAME]`: it validates the policies as the API server would (ConfigMaps in the
// files are the tables of tenant limits the policies name) and prints the
// policies.json the controller would write for them, with N unnamed ready pods behind every
// policy (each holds floor(limit/N) while Redis is down), or with the ready pods named (each
// policy selecting all of them; each holds its ranked share, and the shares sum to the limit).
func runRender(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var files fileList
	fs.Var(&files, "f", "a file of RateLimitPolicy manifests, and the ConfigMaps of their tenant limits (YAML or JSON; - for standard input); repeatable")
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
	policies, configMaps, err := readPolicies(files)
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
	for i := range configMaps {
		if configMaps[i].Namespace == "" {
			configMaps[i].Namespace = ns
		}
	}
	doc, payload, verdicts, err := render.BuildFit(ns, policies, offline{behind, render.NewConfigMapTables(configMaps)}, 0)
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
	for _, p := range policies {
		for _, t := range verdicts[p.Name].Tenants {
			if t.Err != nil {
				rejected = append(rejected, fmt.Errorf("RateLimitPolicy %q, rule %s: %w", p.Name, t.Rule, t.Err))
			}
		}
	}
	if len(rejected) > 0 {
		// The controller would render the rule without the table (or with its last good
		// one); offline, give the table's ConfigMap with -f.
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

// offline answers render.Build for sluicectl render: the pods as the flags say, and the tables
// of tenant limits from the ConfigMaps given with the policies.
type offline struct {
	render.Pods
	render.ConfigMapTables
}

// Fingerprint implements render.Fingerprinter.
func (o offline) Fingerprint() string {
	fp, _ := o.Pods.(render.Fingerprinter)
	if fp == nil {
		return ""
	}
	return fp.Fingerprint() + "\x01" + o.ConfigMapTables.Fingerprint()
}

// readPolicies reads the policies of files, and the ConfigMaps beside them (tables of tenant
// limits).
func readPolicies(files []string) ([]v1alpha1.RateLimitPolicy, []corev1.ConfigMap, error) {
	var all []v1alpha1.RateLimitPolicy
	var configMaps []corev1.ConfigMap
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
		m, err := policyfile.DecodeManifests(r, name)
		if err != nil {
			errs = append(errs, err)
		}
		all = append(all, m.Policies...)
		configMaps = append(configMaps, m.ConfigMaps...)
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	seen := map[string]bool{}
	for _, p := range all {
		if seen[p.Name] {
			return nil, nil, fmt.Errorf("RateLimitPolicy %q is given twice", p.Name)
		}
		seen[p.Name] = true
	}
	return all, configMaps, nil
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
