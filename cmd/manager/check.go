package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/inject"
	"github.com/sluice-dev/sluice/internal/webhook"
)

// runCheck is `manager check`, the chart's `helm test`: it asks the API server for
// RateLimitPolicies (the CRD is served and the manager's RBAC reads them), then sends the
// injection webhook an AdmissionReview of an annotated pod through its Service, trusting only
// the caBundle of the webhook configuration, and expects the sidecar in the answer. It runs
// with the manager's ServiceAccount and needs no other permission.
func runCheck(args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	configuration := fs.String("webhook-configuration", webhook.ConfigurationName, "MutatingWebhookConfiguration whose webhook to call")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to keep trying")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := client.New(ctrl.GetConfigOrDie(), client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var last error
	for {
		if last = checkOnce(ctx, c, *configuration); last == nil {
			return nil
		}
		fmt.Fprintln(os.Stderr, "not yet:", last)
		select {
		case <-ctx.Done():
			return last
		case <-time.After(2 * time.Second):
		}
	}
}

func checkOnce(ctx context.Context, c client.Client, configuration string) error {
	var policies v1alpha1.RateLimitPolicyList
	if err := c.List(ctx, &policies, client.Limit(1)); err != nil {
		return fmt.Errorf("listing RateLimitPolicies (is the CRD installed?): %w", err)
	}
	fmt.Println("ok: the API server serves", v1alpha1.GroupVersion.WithResource("ratelimitpolicies").String())

	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, types.NamespacedName{Name: configuration}, &mwc); err != nil {
		return err
	}
	if len(mwc.Webhooks) == 0 || mwc.Webhooks[0].ClientConfig.Service == nil {
		return fmt.Errorf("%s has no webhook with a Service", configuration)
	}
	cc := mwc.Webhooks[0].ClientConfig
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cc.CABundle) {
		return fmt.Errorf("%s has no caBundle yet", configuration)
	}
	svc := cc.Service
	port, path := int32(443), ""
	if svc.Port != nil {
		port = *svc.Port
	}
	if svc.Path != nil {
		path = *svc.Path
	}
	host := fmt.Sprintf("%s.%s.svc", svc.Name, svc.Namespace)

	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "sluice-check", Namespace: "default", Annotations: map[string]string{inject.AnnotationInject: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return err
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "sluice-check", Operation: admissionv1.Create, Namespace: "default", Name: pod.Name,
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object:   runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: host}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("https://%s:%d%s", host, port, path), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("calling the webhook: %w", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the webhook answered %s: %s", resp.Status, data)
	}
	var answer admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &answer); err != nil {
		return fmt.Errorf("the webhook's answer: %w", err)
	}
	switch r := answer.Response; {
	case r == nil:
		return errors.New("the webhook's answer has no response")
	case !r.Allowed:
		return fmt.Errorf("the webhook denied an annotated pod: %v", r.Result)
	case len(r.Patch) == 0 || !bytes.Contains(r.Patch, []byte(inject.ContainerName)):
		return fmt.Errorf("the webhook did not inject the sidecar: %s", r.Patch)
	}
	fmt.Printf("ok: the webhook at %s:%d%s injects the sidecar, with a certificate the caBundle trusts\n", host, port, path)
	return nil
}
