package vap

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
)

// Pod rules on workload templates.
//
// A policy on Pods judges a Pod only when some controller creates it: a Deployment whose template breaks the
// policy is accepted, and its Pods are then refused one by one, or, for an audit-only policy, created and
// reported only once they exist. Evaluating the template as the Pod it will become reports the problem on the
// workload, where it is fixed, as soon as the workload is stored.
//
// The Pod is what the template holds: the workload's namespace, a generateName from the workload's name, the
// template's labels, annotations and spec. What the controllers add when they create Pods (the
// pod-template-hash label of a Deployment's ReplicaSet, a StatefulSet's pod-name label and hostname, a
// DaemonSet's node affinity and tolerations, owner references) and what admission plugins add (a service
// account token volume, tolerations, priority) is not simulated: rules on those fields judge the template
// alone. The Pod has no name, as the request creating it has none before the apiserver generates one.

// podsResource is the core v1 pods resource, the only one templates are evaluated as.
func podsResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Version: "v1", Resource: "pods"}
}

// Fields of a workload's pod template and of the Pod made from it.
const (
	fieldSpec     = "spec"
	fieldTemplate = "template"
	fieldMetadata = "metadata"
)

// templatePath returns where an object of gvr, a workload resource, holds its pod template; ok is false for
// other resources. Only the versions that are served today are listed: older versions of these resources
// are no longer served by any supported kube-apiserver.
func templatePath(gvr schema.GroupVersionResource) (path []string, ok bool) {
	switch gvr.Group + "/" + gvr.Version + "/" + gvr.Resource {
	case "apps/v1/deployments", "apps/v1/statefulsets", "apps/v1/daemonsets", "apps/v1/replicasets", "batch/v1/jobs":
		return []string{fieldSpec, fieldTemplate}, true
	case "batch/v1/cronjobs":
		return []string{fieldSpec, "jobTemplate", fieldSpec, fieldTemplate}, true
	}
	return nil, false
}

// expandingPodTemplates returns the policy that also evaluates the pod templates of workloads (apps/v1
// Deployments, StatefulSets, DaemonSets and ReplicaSets, batch/v1 Jobs and CronJobs) as the Pods their
// controllers would create. A template is evaluated exactly as the policy evaluates a stored Pod (the same
// bindings, params, namespace and object selectors, matchConditions), and its results are reported on the
// workload, with the property podTemplate "true"; Pods themselves are evaluated as before, and so are the
// workloads when the policy matches them itself. A workload without a usable template gets one error result.
//
// Resources additionally lists the workload resources the resolver serves with list and watch, provided some
// binding applies to core v1 Pods; otherwise the policy evaluates no template and is returned as it is. p is
// not modified; both policies are immutable and share what they can.
//
// Bind calls it for a policy annotated celaudit.io/expand-pod-templates: "true", the one way to ask for it:
// an AuditPolicy's spec.expandPodTemplates sets that annotation on the ValidatingAdmissionPolicy it stands
// for, so that the compile cache key (CacheKey) covers it and every front end expands alike.
func (p *Policy) expandingPodTemplates() *Policy {
	if p.templates != nil || !p.coversPods() {
		return p
	}
	out := *p
	out.templates = map[schema.GroupVersionResource]bool{}
	reads := map[schema.GroupVersionResource]bool{}
	for _, r := range p.resources {
		reads[r] = true
	}
	out.resources = nil
	for _, r := range p.deps.Resolver.ServedResources() {
		if _, workload := templatePath(r.Resource); workload && r.Auditable {
			out.templates[r.Resource] = true
			reads[r.Resource] = true
		}
		if reads[r.Resource] {
			out.resources = append(out.resources, r.Resource)
			delete(reads, r.Resource)
		}
	}
	return &out
}

// coversPods reports whether some binding evaluates core v1 Pods, read as v1 Pods: a template is evaluated
// with that plan, as a stored Pod is.
func (p *Policy) coversPods() bool {
	pods := podsResource()
	key := p.classKey(pods)
	for _, b := range p.bindings {
		if pl, ok := b.plans[key]; ok && pl.Read == pods {
			return true
		}
	}
	return false
}

// evaluateTemplate evaluates the pod template of workload, read at gvr, as the Pod made from it, and reports
// the results on the workload.
func (p *Policy) evaluateTemplate(ctx context.Context, gvr schema.GroupVersionResource, workload *unstructured.Unstructured) []audit.Result {
	e := &evaluation{p: p, ctx: ctx, ref: audit.RefOf(workload), template: true}
	path, _ := templatePath(gvr)
	pod, err := podFromTemplate(workload, path)
	if err != nil {
		return []audit.Result{e.result(RulePodTemplate, audit.Error, err.Error(), nil)}
	}
	e.obj = pod
	return e.run(podsResource())
}

// podFromTemplate returns the Pod a controller would create from the pod template at path in workload: in the
// workload's namespace, with a generateName from its name, and the template's labels, annotations and spec.
// The Pod shares the template's maps, which evaluation only reads. A template that is missing or not shaped as
// the API defines it is an error naming the field.
func podFromTemplate(workload *unstructured.Unstructured, path []string) (*unstructured.Unstructured, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("cannot evaluate the pod template of %s %q: %s", workload.GetKind(), workload.GetName(), fmt.Sprintf(format, args...))
	}
	var cur any = workload.Object
	for i, field := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fail("%s is not an object but %s", strings.Join(path[:i], "."), jsonType(cur))
		}
		if cur, ok = m[field]; !ok || cur == nil {
			return nil, fail("%s is missing", strings.Join(path[:i+1], "."))
		}
	}
	template, ok := cur.(map[string]any)
	if !ok {
		return nil, fail("%s is not an object but %s", strings.Join(path, "."), jsonType(cur))
	}
	at := func(fields ...string) string { return strings.Join(append(slices.Clone(path), fields...), ".") }

	spec, ok := template[fieldSpec]
	if !ok || spec == nil {
		return nil, fail("%s is missing", at(fieldSpec))
	}
	if _, ok := spec.(map[string]any); !ok {
		return nil, fail("%s is not an object but %s", at(fieldSpec), jsonType(spec))
	}
	metadata := map[string]any{"generateName": workload.GetName() + "-"}
	if ns := workload.GetNamespace(); ns != "" {
		metadata["namespace"] = ns
	}
	if m, ok := template[fieldMetadata]; ok && m != nil {
		tm, ok := m.(map[string]any)
		if !ok {
			return nil, fail("%s is not an object but %s", at(fieldMetadata), jsonType(m))
		}
		for _, field := range []string{"labels", "annotations"} {
			v, ok := tm[field]
			if !ok || v == nil {
				continue
			}
			values, ok := v.(map[string]any)
			if !ok {
				return nil, fail("%s is not an object but %s", at(fieldMetadata, field), jsonType(v))
			}
			for k, s := range values {
				if _, ok := s.(string); !ok {
					return nil, fail("%s[%q] is not a string but %s", at(fieldMetadata, field), k, jsonType(s))
				}
			}
			metadata[field] = values
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion":  "v1",
		"kind":        "Pod",
		fieldMetadata: metadata,
		fieldSpec:     spec,
	}}, nil
}

// jsonType names the JSON type of a value of an unstructured object, for messages.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64, int, int32, float32:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
