package controller

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/render"
)

// keySetView answers render.KeySets for one namespace: the public keys of the Secrets its
// policies' spec.jwt.jwks.secretRef name, from the Secrets labelled v1alpha1.JWKSSecretLabel
// (the only ones the manager caches). When a Secret gives no usable key set, the keys the
// namespace's ConfigMap holds for the policy stay (previous): a Secret deleted or garbled by
// mistake never leaves a policy without the keys it had, and a policy is never left out for
// it, so its limits keep applying.
type keySetView struct {
	secrets  map[string]*corev1.Secret
	previous map[string]json.RawMessage
}

// keySetError is why a policy's Secret gave no key set, with the condition's reason.
type keySetError struct {
	reason string
	msg    string
}

func (e *keySetError) Error() string { return e.msg }

// newKeySetView reads the labelled Secrets of ns, and the key sets of rendered (the ConfigMap
// rendered last, nil when none), when one of policies names a Secret (otherwise nothing: a
// reconcile of a namespace without such a policy decodes no ConfigMap).
func newKeySetView(ctx context.Context, c client.Reader, ns string, policies []v1alpha1.RateLimitPolicy, rendered *corev1.ConfigMap) (*keySetView, error) {
	v := &keySetView{secrets: map[string]*corev1.Secret{}, previous: map[string]json.RawMessage{}}
	if !slices.ContainsFunc(policies, func(p v1alpha1.RateLimitPolicy) bool { _, _, ok := render.JWKSSecret(&p); return ok }) {
		return v, nil
	}
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace(ns), client.MatchingLabels{v1alpha1.JWKSSecretLabel: v1alpha1.LabelEnabled}); err != nil {
		return nil, err
	}
	for i := range secrets.Items {
		v.secrets[secrets.Items[i].Name] = &secrets.Items[i]
	}
	if rendered == nil {
		return v, nil
	}
	doc, err := policy.Decode([]byte(rendered.Data[policy.DataKey]), rendered.BinaryData[policy.CompressedKey])
	if err != nil {
		return v, nil //nolint:nilerr // an unreadable ConfigMap has no keys to keep; it is rewritten
	}
	for _, p := range doc.Policies {
		if p.JWT != nil && len(p.JWT.JWKS) > 0 {
			v.previous[p.Name] = p.JWT.JWKS
		}
	}
	return v, nil
}

// KeySet implements render.KeySets.
func (v *keySetView) KeySet(p *v1alpha1.RateLimitPolicy) (json.RawMessage, error) {
	name, key, _ := render.JWKSSecret(p)
	var kerr *keySetError
	if s, ok := v.secrets[name]; !ok {
		kerr = &keySetError{v1alpha1.ReasonSecretMissing, fmt.Sprintf("Secret %s with the label %s: \"true\" was not found in the namespace (the controller reads no other Secret)", name, v1alpha1.JWKSSecretLabel)}
	} else if data, ok := s.Data[key]; !ok {
		kerr = &keySetError{v1alpha1.ReasonInvalidJWKS, fmt.Sprintf("Secret %s has no key %s", name, key)}
	} else if pub, _, err := policy.PublicJWKS(data); err != nil {
		kerr = &keySetError{v1alpha1.ReasonInvalidJWKS, fmt.Sprintf("Secret %s, key %s: %v", name, key, err)}
	} else {
		return pub, nil
	}
	if prev, ok := v.previous[p.Name]; ok && string(prev) != string(policy.EmptyJWKS) {
		kerr.msg += "; the keys rendered before stay in use"
		return prev, kerr
	}
	kerr.msg += "; the policy has no keys yet, so every request counts as unverified"
	return policy.EmptyJWKS, kerr
}

// Fingerprint summarises what KeySet answers from: each labelled Secret's name and resource
// version, and the key sets rendered before.
func (v *keySetView) Fingerprint() string {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(v.secrets)) {
		fmt.Fprintf(h, "secret\x00%s\x00%s\n", name, v.secrets[name].ResourceVersion)
	}
	for _, name := range slices.Sorted(maps.Keys(v.previous)) {
		fmt.Fprintf(h, "keys\x00%s\x00%s\n", name, v.previous[name])
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// setKeySetStatus sets the JWKSResolved condition of a rendered policy whose key set comes
// from a Secret, and removes it from any other.
func setKeySetStatus(p *v1alpha1.RateLimitPolicy, v render.Verdict, set func(metav1.Condition)) {
	name, key, ok := render.JWKSSecret(p)
	if !ok || v.Err != nil {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.ConditionJWKSResolved)
		return
	}
	var kerr *keySetError
	switch {
	case v.KeysErr == nil:
		set(metav1.Condition{Type: v1alpha1.ConditionJWKSResolved, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonJWKSRendered,
			Message: fmt.Sprintf("The public keys of Secret %s, key %s, are rendered.", name, key)})
	case errors.As(v.KeysErr, &kerr):
		set(metav1.Condition{Type: v1alpha1.ConditionJWKSResolved, Status: metav1.ConditionFalse, Reason: kerr.reason, Message: kerr.msg})
	default:
		set(metav1.Condition{Type: v1alpha1.ConditionJWKSResolved, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonInvalidJWKS, Message: v.KeysErr.Error()})
	}
}

// jwksSecret reports whether o is a Secret the controller reads key sets from.
func jwksSecret(o client.Object) bool {
	return o.GetLabels()[v1alpha1.JWKSSecretLabel] == v1alpha1.LabelEnabled
}
