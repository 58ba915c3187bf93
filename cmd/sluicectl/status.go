package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/status"
)

// runStatus implements `sluicectl status -n NAMESPACE [--interval 5s] [--kubeconfig FILE]
// [--context NAME]`: it scrapes the sidecars of the namespace's injected pods twice through the
// API server's pod proxy and prints, per policy and rule, what they decide per second now.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	namespace := fs.String("n", "", "namespace of the policies (default: the kubeconfig context's)")
	fs.StringVar(namespace, "namespace", "", "same as -n")
	interval := fs.Duration("interval", 5*time.Second, "time between the two scrapes the rates are computed from")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	kubecontext := fs.String("context", "", "kubeconfig context (default the current one)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if strayArgument(fs, stderr) {
		return 2
	}
	if *interval < 100*time.Millisecond || *interval > 10*time.Minute {
		fmt.Fprintln(stderr, "usage: sluicectl status [-n NAMESPACE] [--interval 5s (100ms to 10m)] [--kubeconfig FILE] [--context NAME]")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := statusOf(ctx, stdout, *kubeconfig, *kubecontext, *namespace, *interval); err != nil {
		fmt.Fprintf(stderr, "sluicectl status: %v\n", err)
		return 1
	}
	return 0
}

func statusOf(ctx context.Context, w io.Writer, kubeconfig, kubecontext, namespace string, interval time.Duration) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubecontext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return err
	}
	if namespace == "" {
		if namespace, _, err = cc.Namespace(); err != nil {
			return err
		}
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var policies v1alpha1.RateLimitPolicyList
	if err := c.List(ctx, &policies, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("listing RateLimitPolicies in %s: %w", namespace, err)
	}
	if len(policies.Items) == 0 {
		_, err := fmt.Fprintf(w, "No RateLimitPolicies in namespace %s.\n", namespace)
		return err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("listing pods in %s: %w", namespace, err)
	}
	ps, targets, err := status.Targets(policies.Items, pods.Items)
	if err != nil {
		return err
	}
	rows, failed := status.Collect(ctx, namespace, ps, targets, status.PodProxy(cs), status.Options{Interval: interval})
	if err := status.Write(w, rows); err != nil {
		return err
	}
	names := make([]string, 0, len(failed))
	for n := range failed {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "pod %s: not scraped: %v\n", n, failed[n])
	}
	return ctx.Err()
}
