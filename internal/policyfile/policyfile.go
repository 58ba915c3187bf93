// Package policyfile reads RateLimitPolicy manifests from files and validates them as the API
// server would: with the generated CRD's defaults, OpenAPI schema and CEL rules, so an offline
// tool rejects exactly what `kubectl apply` would, with the same messages.
package policyfile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/config/crd"
)

type schema struct {
	structural *structuralschema.Structural
	openapi    apiservervalidation.SchemaCreateValidator
	cel        *cel.Validator
}

var loadSchema = sync.OnceValues(func() (*schema, error) {
	var def apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(crd.RateLimitPolicies, &def); err != nil {
		return nil, fmt.Errorf("embedded CRD: %w", err)
	}
	var version *apiextensionsv1.CustomResourceDefinitionVersion
	for i := range def.Spec.Versions {
		if def.Spec.Versions[i].Name == v1alpha1.GroupVersion.Version {
			version = &def.Spec.Versions[i]
		}
	}
	if version == nil || version.Schema == nil {
		return nil, fmt.Errorf("embedded CRD has no schema for %s", v1alpha1.GroupVersion)
	}
	var props apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(version.Schema.OpenAPIV3Schema, &props, nil); err != nil {
		return nil, err
	}
	structural, err := structuralschema.NewStructural(&props)
	if err != nil {
		return nil, err
	}
	openapi, _, err := apiservervalidation.NewSchemaValidator(&props)
	if err != nil {
		return nil, err
	}
	return &schema{
		structural: structural,
		openapi:    openapi,
		cel:        cel.NewValidator(structural, true, celconfig.PerCallLimit),
	}, nil
})

// Decode reads YAML or JSON documents (separated by ---) from r. Each must be a
// RateLimitPolicy; it is defaulted and validated as the API server would do on create, with
// strict field validation as `kubectl apply` asks for by default: a field the CRD does not
// declare is an error naming its path ("unknown field \"spec.rules[0].keys\""), not pruned.
// source names r in messages. The error lists every invalid document's field errors.
func Decode(r io.Reader, source string) ([]v1alpha1.RateLimitPolicy, error) {
	m, err := decode(r, source, false)
	return m.Policies, err
}

// Manifests are what DecodeManifests reads: policies and the ConfigMaps beside them (the
// tables of tenant limits the policies name).
type Manifests struct {
	Policies   []v1alpha1.RateLimitPolicy
	ConfigMaps []corev1.ConfigMap
}

// DecodeManifests is Decode that also takes ConfigMaps (apiVersion v1), decoded strictly: a
// field a ConfigMap does not have is an error.
func DecodeManifests(r io.Reader, source string) (Manifests, error) {
	return decode(r, source, true)
}

func decode(r io.Reader, source string, configMaps bool) (Manifests, error) {
	var out Manifests
	s, err := loadSchema()
	if err != nil {
		return out, err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var errs []error
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Manifests{}, fmt.Errorf("%s: %w", source, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		if configMaps && isConfigMap(doc) {
			var cm corev1.ConfigMap
			if err := yaml.UnmarshalStrict(doc, &cm); err != nil {
				errs = append(errs, fmt.Errorf("%s (document %d): ConfigMap: %w", source, i+1, err))
				continue
			}
			out.ConfigMaps = append(out.ConfigMaps, cm)
			continue
		}
		p, err := s.decode(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (document %d): %w", source, i+1, err))
			continue
		}
		out.Policies = append(out.Policies, *p)
	}
	return out, errors.Join(errs...)
}

// isConfigMap reports whether doc is a manifest of apiVersion v1, kind ConfigMap.
func isConfigMap(doc []byte) bool {
	var tm metav1.TypeMeta
	return yaml.Unmarshal(doc, &tm) == nil && tm.APIVersion == "v1" && tm.Kind == "ConfigMap"
}

func (s *schema) decode(doc []byte) (*v1alpha1.RateLimitPolicy, error) {
	data, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	// utiljson decodes numbers as int64 where they are integers, as the API server does.
	var obj map[string]any
	if err := utiljson.Unmarshal(data, &obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("empty document")
	}
	if obj["apiVersion"] != v1alpha1.GroupVersion.String() || obj["kind"] != "RateLimitPolicy" {
		return nil, fmt.Errorf("apiVersion %v, kind %v: want %s, RateLimitPolicy", obj["apiVersion"], obj["kind"], v1alpha1.GroupVersion)
	}
	name := "<unnamed>"
	if md, ok := obj["metadata"].(map[string]any); ok {
		if n, ok := md["name"].(string); ok && n != "" {
			name = n
		}
	}
	// The API server's order: reject unknown fields (kubectl apply asks for strict field
	// validation by default; the server would prune them silently otherwise), prune nulls,
	// default, validate the schema and list invariants, then the CEL rules unless a schema error
	// makes them meaningless.
	unknown := structuralpruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(unknown) > 0 {
		errs := make([]error, len(unknown))
		for i, path := range unknown {
			errs[i] = fmt.Errorf("unknown field %q", path)
		}
		return nil, fmt.Errorf("RateLimitPolicy.sluice.dev %q cannot be handled as a RateLimitPolicy: %w", name, runtime.NewStrictDecodingError(errs))
	}
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, s.structural)
	structuraldefaulting.Default(obj, s.structural)
	var errs field.ErrorList
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, s.openapi)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, s.structural, obj)...)
	if blocksCEL(errs) {
		errs = append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
	} else {
		celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("RateLimitPolicy.sluice.dev %q is invalid: %w", name, errs.ToAggregate())
	}
	var p v1alpha1.RateLimitPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &p); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, errors.New("metadata.name: Required value")
	}
	return &p, nil
}

// blocksCEL reports whether the schema errors are of the kinds after which the API server does
// not evaluate CEL rules (a missing, mistyped, unsupported or oversized value).
func blocksCEL(errs field.ErrorList) bool {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}
