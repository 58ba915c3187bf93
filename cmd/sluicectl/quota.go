package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluice-dev/sluice/internal/dataplane/keys"
	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/limiter/redisstore"
	"github.com/sluice-dev/sluice/internal/policy"
)

const quotaUsage = `usage: sluicectl quota get|reset -n NAMESPACE --policy NAME --rule RULE --key VALUE[,VALUE...]
         --redis-url URL [--policies FILE | --kubeconfig FILE [--context NAME]]

get shows the state of one counter of a rule: remaining, when it is back to full, and the debt a
TokenBucket owes after charges from responses; of a Concurrency rule, the slots held and each
holding (the sidecar's holder id, the request's number, when it expires unless renewed). reset
deletes it, as if never seen (a Concurrency key's requests in flight then hold nothing). --key gives
the key parts' values in the rule's order (a client address, a header's or query parameter's
value, a path, a method): the Redis key is built from them by the sidecar's own code. The rule
is read from the namespace's rendered policies: the sluice-policies ConfigMap (via the API
server), or --policies, a policies.json.
`

// runQuota implements `sluicectl quota`: exit 0 on success, 1 when the lookup failed, 2 for a
// usage error.
func runQuota(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "get" && args[0] != "reset") {
		fmt.Fprint(stderr, quotaUsage)
		return 2
	}
	verb := args[0]
	fs := flag.NewFlagSet("quota "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	namespace := fs.String("n", "", "namespace of the policy")
	policyName := fs.String("policy", "", "the RateLimitPolicy's name")
	ruleName := fs.String("rule", "", "the rule's name")
	keyValues := fs.String("key", "", "the key parts' values, comma-separated, in the rule's order")
	redisURL := fs.String("redis-url", "", "the Redis the sidecars decide with")
	policiesFile := fs.String("policies", "", "a rendered policies.json to read the rule from, instead of the cluster")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	kubecontext := fs.String("context", "", "kubeconfig context (default the current one)")
	fs.Usage = func() { fmt.Fprint(stderr, quotaUsage, "\nflags:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if strayArgument(fs, stderr) {
		return 2
	}
	if *policyName == "" || *ruleName == "" || *keyValues == "" || *redisURL == "" || (*namespace == "" && *policiesFile == "") {
		fmt.Fprintln(stderr, "sluicectl quota: -n, --policy, --rule, --key and --redis-url are required")
		fs.Usage()
		return 2
	}
	ctx := context.Background()
	doc, err := renderedPolicies(ctx, *policiesFile, *kubeconfig, *kubecontext, *namespace)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl quota: %v\n", err)
		return 1
	}
	if *namespace != "" && doc.Namespace != *namespace {
		fmt.Fprintf(stderr, "sluicectl quota: the policies are namespace %s's, not %s's\n", doc.Namespace, *namespace)
		return 1
	}
	lim, key, err := quotaKey(doc, *policyName, *ruleName, strings.Split(*keyValues, ","))
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl quota: %v\n", err)
		return 1
	}
	client, err := redisstore.NewClientFromURL(*redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl quota: %v\n", err)
		return 2
	}
	defer client.Close()
	store := redisstore.New(client, redisstore.Options{Timeout: 5 * time.Second})
	defer store.Close()
	name := fmt.Sprintf("%s/%s key %s", *policyName, *ruleName, *keyValues)
	if verb == "reset" {
		found, err := store.Reset(ctx, key, lim)
		if err != nil {
			fmt.Fprintf(stderr, "sluicectl quota: %v\n", err)
			return 1
		}
		if !found {
			fmt.Fprintf(stdout, "%s: never seen (or expired); nothing to reset\n", name)
			return 0
		}
		fmt.Fprintf(stdout, "%s: reset; its next request starts from a full limit\n", name)
		return 0
	}
	if lim.Algorithm == limiter.Concurrency {
		if err := printHoldings(ctx, stdout, client, store, name, key, lim); err != nil {
			fmt.Fprintf(stderr, "sluicectl quota: %v\n", err)
			return 1
		}
		return 0
	}
	st, err := store.Inspect(ctx, key, lim, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "sluicectl quota: %v\n", err)
		return 1
	}
	if !st.Found {
		fmt.Fprintf(stdout, "%s: never seen (or expired): the full limit of %d remains\n", name, lim.Capacity())
		return 0
	}
	r := st.Result
	fmt.Fprintf(stdout, "%s\n  limit:     %d per %s (%s)\n  remaining: %d\n  reset in:  %s (at %s)\n  debt:      %d\n",
		name, lim.Capacity(), lim.Per(), lim.Algorithm, r.Remaining, r.ResetAfter,
		time.Now().Add(r.ResetAfter).UTC().Truncate(time.Second).Format(time.RFC3339), st.Debt)
	if !r.Allowed {
		fmt.Fprintf(stdout, "  denied:    every request until the debt is paid, in %s\n", r.RetryAfter)
	}
	return 0
}

// printHoldings shows a Concurrency key: its limit, the slots held now and each holding, with
// how long until it expires unless its sidecar renews it, on Redis's clock (the one the
// holdings are scored on). Expired holdings that no decision has dropped yet are listed as
// expired and not counted.
func printHoldings(ctx context.Context, w io.Writer, client redis.UniversalClient, store *redisstore.Store, name, key string, lim limiter.Limit) error {
	hs, err := store.Holdings(ctx, key, lim)
	if err != nil {
		return err
	}
	now, err := client.Time(ctx).Result()
	if err != nil {
		return err
	}
	held := 0
	for _, h := range hs {
		if h.Expires.After(now) {
			held++
		}
	}
	fmt.Fprintf(w, "%s\n  limit:     %d requests in flight (Concurrency)\n  held:      %d\n  free:      %d\n",
		name, lim.Limit, held, max(lim.Limit-int64(held), 0))
	for _, h := range hs {
		left := h.Expires.Sub(now).Truncate(time.Millisecond)
		if left <= 0 {
			fmt.Fprintf(w, "  holder %d request %d: expired %s ago\n", h.Holder, h.Number, -left)
			continue
		}
		fmt.Fprintf(w, "  holder %d request %d: expires in %s unless renewed\n", h.Holder, h.Number, left)
	}
	return nil
}

// quotaKey finds the rule and builds its limiter key from the values as the sidecar does.
func quotaKey(doc *policy.Document, policyName, ruleName string, values []string) (limiter.Limit, string, error) {
	for _, p := range doc.Policies {
		if p.Name != policyName {
			continue
		}
		for _, r := range p.Rules {
			if r.Name != ruleName {
				continue
			}
			if r.Adaptive != nil {
				return limiter.Limit{}, "", fmt.Errorf("rule %s is adaptive: each pod keeps its own limit, in no store (sluice_adaptive_limit on each pod's metrics shows it)", r.Name)
			}
			trusted, err := keys.ParseTrusted(p.TrustedProxies)
			if err != nil {
				return limiter.Limit{}, "", err
			}
			k := keys.CompileKey(p.Name, r.Name, r.Key, trusted)
			key, err := k.FromValues(values)
			if err != nil {
				return limiter.Limit{}, "", fmt.Errorf("rule %s: %w (%s)", r.Name, err, describeKey(r.Key))
			}
			return r.LimiterLimit(), key, nil
		}
		return limiter.Limit{}, "", fmt.Errorf("policy %s has no rule %s", policyName, ruleName)
	}
	return limiter.Limit{}, "", fmt.Errorf("no accepted policy %s in the rendered policies of namespace %s", policyName, doc.Namespace)
}

func describeKey(parts []policy.KeyPart) string {
	var s []string
	for _, p := range parts {
		if p.Name != "" {
			s = append(s, p.Source+" "+p.Name)
		} else {
			s = append(s, p.Source)
		}
	}
	return "its key is " + strings.Join(s, ", ")
}

// renderedPolicies reads a policies.json, or the namespace's sluice-policies ConfigMap.
func renderedPolicies(ctx context.Context, file, kubeconfig, kubecontext, namespace string) (*policy.Document, error) {
	if file != "" {
		data, err := os.ReadFile(file) //nolint:gosec // the user's own --policies file
		if err != nil {
			return nil, err
		}
		return policy.Decode(data, nil)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubecontext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var cm *corev1.ConfigMap
	if cm, err = cs.CoreV1().ConfigMaps(namespace).Get(ctx, policy.ConfigMapName, metav1.GetOptions{}); err != nil {
		return nil, err
	}
	return policy.Decode([]byte(cm.Data[policy.DataKey]), cm.BinaryData[policy.CompressedKey])
}
