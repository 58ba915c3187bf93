package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Path is where the manager's webhook server serves the injector.
const Path = "/mutate-v1-pod"

// ConfigurationName is the MutatingWebhookConfiguration config/default installs: the generated
// "mutating-webhook-configuration" with the "sluice-" name prefix.
const ConfigurationName = "sluice-mutating-webhook-configuration"

// ProtectedNamespaces are never sent to the webhook, whatever their pods say, besides the
// manager's own namespace: the webhook must never stand between the cluster and the pods that
// run it (or run the cluster).
var ProtectedNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// The webhook sees only pod creations outside the manager's namespace and the system
// namespaces (the namespaceSelector; config/default keeps its first value equal to the
// namespace it deploys into). failurePolicy is Ignore: with Fail, a manager outage would stop
// every pod creation in the cluster, since pods cannot be preselected by annotation; a pod
// admitted while the webhook is unreachable runs without the sidecar, and the controller
// reports it on the policies that select it (status.uninjectedPods and a Warning event).
//
// +kubebuilder:webhook:path=/mutate-v1-pod,mutating=true,failurePolicy=ignore,sideEffects=None,groups="",resources=pods,verbs=create,versions=v1,name=inject.sluice.dev,admissionReviewVersions=v1,timeoutSeconds=5,reinvocationPolicy=Never,patch=`{"namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["sluice-system","kube-system","kube-public","kube-node-lease"]}]}}`

// Injector is the admission handler that injects the sidecar. Safe for concurrent use.
type Injector struct {
	config  Config
	decoder admission.Decoder
}

// NewInjector returns the handler for a validated configuration.
func NewInjector(config Config, scheme *runtime.Scheme) *Injector {
	return &Injector{config: config, decoder: admission.NewDecoder(scheme)}
}

// Handle injects the sidecar into a pod being created that asks for it. A pod whose
// annotations cannot be honoured is denied with a message naming the annotation: admitting it
// would run it either unprotected or with traffic sent to the wrong port, and a denial shows
// up where the user looks (kubectl's error, the ReplicaSet's FailedCreate events).
func (i *Injector) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return admission.Allowed("")
	}
	if slices.Contains(i.config.ExcludedNamespaces, req.Namespace) {
		return admission.Allowed("namespace excluded from injection")
	}
	pod := &corev1.Pod{}
	if err := i.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	changed, err := i.config.Mutate(pod)
	if err != nil {
		return admission.Denied(err.Error())
	}
	if !changed {
		return admission.Allowed("")
	}
	mutated, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	name := pod.Name
	if name == "" {
		name = pod.GenerateName
	}
	logf.FromContext(ctx).V(1).Info("Injected sidecar", "namespace", req.Namespace, "pod", name)
	return admission.PatchResponseFromRaw(req.Object.Raw, mutated)
}

// Setup serves the injector on the manager's webhook server at Path.
func Setup(mgr ctrl.Manager, config Config) error {
	if err := config.Validate(); err != nil {
		return err
	}
	mgr.GetWebhookServer().Register(Path, &admission.Webhook{Handler: NewInjector(config, mgr.GetScheme())})
	return nil
}
