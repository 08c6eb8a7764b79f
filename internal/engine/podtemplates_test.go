package engine

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/vap"
)

// TestCompileExpandsPodTemplates checks that a policy object annotated to expand pod templates, compiled
// from objects as every front end compiles it, covers workloads and reports their templates' results on
// them; without the annotation it covers Pods alone.
func TestCompileExpandsPodTemplates(t *testing.T) {
	resolver := podsAndDeployments(t)
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	policy := func(annotations map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
			"metadata": map[string]any{"name": "no-latest", "annotations": annotations},
			"spec": map[string]any{
				"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
					"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods"}, "operations": []any{"CREATE"},
				}}},
				"validations": []any{map[string]any{"expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))"}},
			},
		}}
	}
	deployment := latestDeployment()

	for _, c := range []struct {
		name        string
		annotations map[string]any
		resources   []schema.GroupVersionResource
		verdicts    []audit.Verdict
	}{
		{"annotated", map[string]any{audit.AnnotationExpandPodTemplates: "true"}, []schema.GroupVersionResource{pods, deployments}, []audit.Verdict{audit.Warn}},
		{"not annotated", nil, []schema.GroupVersionResource{pods}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			policies, err := Compiler{}.Compile([]*unstructured.Unstructured{policy(c.annotations)}, Views{Resources: resolver, Namespaces: oneNamespace{}})
			if err != nil {
				t.Fatal(err)
			}
			set := NewSet(policies...)
			if got := set.Resources(); !equalGVRs(got, c.resources) {
				t.Errorf("Resources() = %v, want %v", got, c.resources)
			}
			var verdicts []audit.Verdict
			for _, r := range evaluate(set, deployments, deployment) {
				verdicts = append(verdicts, r.Verdict)
				if r.Resource != audit.RefOf(deployment) || r.Properties[audit.PropPodTemplate] != "true" {
					t.Errorf("result %+v: want it on the Deployment, with podTemplate true", r)
				}
			}
			if !equalVerdicts(verdicts, c.verdicts) {
				t.Errorf("verdicts on the Deployment = %v, want %v", verdicts, c.verdicts)
			}
		})
	}
}

func equalGVRs(a, b []schema.GroupVersionResource) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalVerdicts(a, b []audit.Verdict) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// oneNamespace serves every namespace name as an empty namespace.
type oneNamespace struct{}

func (oneNamespace) Get(name string) (*corev1.Namespace, error) {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
}

// TestCompileAuditPolicyExpandsPodTemplates checks that an AuditPolicy's spec.expandPodTemplates expands pod
// templates as the annotation does on a policy, and that its results carry its name and the verdict of its
// enforcement.
func TestCompileAuditPolicyExpandsPodTemplates(t *testing.T) {
	resolver := podsAndDeployments(t)
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	deployment := latestDeployment()
	ap := func(expand bool, enforcement string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "audit.celaudit.io/v1alpha1", "kind": "AuditPolicy",
			"metadata": map[string]any{"name": "no-latest"},
			"spec": map[string]any{
				"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
					"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods"}, "operations": []any{"CREATE"},
				}}},
				"validations":        []any{map[string]any{"expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))", "message": "no latest"}},
				"expandPodTemplates": expand,
				"enforcement":        enforcement,
			},
		}}
	}
	for _, c := range []struct {
		name        string
		expand      bool
		enforcement string
		want        []audit.Verdict
	}{
		{"expanded, Deny", true, "Deny", []audit.Verdict{audit.Fail}},
		{"expanded, Audit", true, "Audit", []audit.Verdict{audit.Warn}},
		{"not expanded", false, "Deny", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			policies, err := Compiler{}.Compile([]*unstructured.Unstructured{ap(c.expand, c.enforcement)}, Views{Resources: resolver, Namespaces: oneNamespace{}})
			if err != nil {
				t.Fatal(err)
			}
			if len(policies) != 1 || policies[0].Key() != audit.AuditPolicyKey("no-latest") {
				t.Fatalf("compiled %d policies, key %v", len(policies), policies[0].Key())
			}
			var verdicts []audit.Verdict
			for _, r := range evaluate(NewSet(policies...), deployments, deployment) {
				verdicts = append(verdicts, r.Verdict)
				if r.Policy != "no-latest" || r.Message != "no latest" || r.Properties[audit.PropPodTemplate] != "true" {
					t.Errorf("result %+v: want policy no-latest, message \"no latest\", podTemplate true", r)
				}
			}
			if !equalVerdicts(verdicts, c.want) {
				t.Errorf("verdicts on the Deployment = %v, want %v", verdicts, c.want)
			}
		})
	}
}

// podsAndDeployments serves pods and deployments.
func podsAndDeployments(t *testing.T) *vap.StaticResolver {
	t.Helper()
	verbs := metav1.Verbs{"get", "list", "watch"}
	resolver, err := vap.NewStaticResolver([]*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: verbs}}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: verbs}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return resolver
}

// latestDeployment is a Deployment whose pod template runs an image tagged latest.
func latestDeployment() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "n", "uid": "u"},
		"spec": map[string]any{"template": map[string]any{
			"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx:latest"}}},
		}},
	}}
}
