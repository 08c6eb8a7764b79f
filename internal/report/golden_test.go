package report

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/crdrules"
	"github.com/celaudit/celaudit/internal/vap"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// serialize writes reports as a YAML stream, the way kubectl prints them.
func serialize(t *testing.T, r Reports) []byte {
	t.Helper()
	var buf bytes.Buffer
	write := func(obj any) {
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	for i := range r.ClusterPolicyReports {
		write(&r.ClusterPolicyReports[i])
	}
	for i := range r.PolicyReports {
		write(&r.PolicyReports[i])
	}
	return buf.Bytes()
}

// The rule sources of the golden reports: a CRD with CEL rules (a message, a messageExpression, a rule that
// fails to evaluate on some objects and a transition rule), a ValidatingAdmissionPolicy on its widgets bound
// with Deny, and one on namespaces bound with Warn.
const (
	goldenCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "!has(self.mode) || self.mode != 'legacy'"
              messageExpression: "'mode ' + self.mode + ' is retired'"
            - rule: "!has(self.size) || self.size / self.divisor >= 1"
              message: size must be at least the divisor
            properties:
              replicas:
                type: integer
                x-kubernetes-validations:
                - rule: self >= 0
                  message: replicas must not be negative
              mode: {type: string}
              size: {type: integer}
              divisor: {type: integer}
              id:
                type: string
                x-kubernetes-validations:
                - rule: self == oldSelf
                  message: id is immutable
`
	goldenReplicaPolicy = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: widget-replica-limit
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [example.com]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [widgets]
  validations:
  - expression: "!has(object.spec.replicas) || object.spec.replicas <= 5"
    messageExpression: "'replicas must be at most 5, got ' + string(object.spec.replicas)"
`
	goldenReplicaBinding = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: widget-replica-limit-deny
spec:
  policyName: widget-replica-limit
  validationActions: [Deny]
`
	goldenTeamPolicy = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: require-team-label
  annotations:
    celaudit.io/severity: high
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [namespaces]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: namespaces need a team label
    reason: Forbidden
`
	goldenTeamBinding = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: require-team-label-warn
spec:
  policyName: require-team-label
  validationActions: [Warn]
`
)

// goldenNamespaces is the vap.NamespaceGetter of the golden audit.
type goldenNamespaces map[string]*corev1.Namespace

func (n goldenNamespaces) Get(name string) (*corev1.Namespace, error) {
	if ns, ok := n[name]; ok {
		return ns, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
}

// goldenResults compiles the rule sources and evaluates them on a few stored objects, as the scanner
// does, and returns every result.
func goldenResults(t *testing.T) []audit.Result {
	t.Helper()
	decode := func(doc string, into any) {
		t.Helper()
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("decoding %T: %v", into, err)
		}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	decode(goldenCRD, crd)
	replicaPolicy, teamPolicy := &admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicy{}
	decode(goldenReplicaPolicy, replicaPolicy)
	decode(goldenTeamPolicy, teamPolicy)
	replicaBinding, teamBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	decode(goldenReplicaBinding, replicaBinding)
	decode(goldenTeamBinding, teamBinding)

	resolver, err := vap.NewStaticResolver([]*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "namespaces", Kind: "Namespace", Verbs: metav1.Verbs{"list", "watch"}}}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	namespaces := goldenNamespaces{}
	var objects []*unstructured.Unstructured
	for _, doc := range []string{
		`{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "uid": "uid-ns-team-a", "labels": {"team": "a"}}}`,
		`{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b", "uid": "uid-ns-team-b"}}`,
		`{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"namespace": "team-a", "name": "w1", "uid": "uid-w1"}, "spec": {"replicas": -1}}`,
		`{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"namespace": "team-a", "name": "w2", "uid": "uid-w2"}, "spec": {"replicas": 2, "id": "w-2"}}`,
		`{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"namespace": "team-a", "name": "w3", "uid": "uid-w3"}, "spec": {"replicas": 9}}`,
		`{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"namespace": "team-b", "name": "w4", "uid": "uid-w4"}, "spec": {"replicas": 1, "size": 4, "divisor": 0}}`,
		`{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"namespace": "team-b", "name": "w5", "uid": "uid-w5"}, "spec": {"mode": "legacy"}}`,
	} {
		// The apiserver's decoder: integers become int64, as CEL expects.
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON([]byte(doc)); err != nil {
			t.Fatal(err)
		}
		if obj.GetKind() == "Namespace" {
			namespaces[obj.GetName()] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: obj.GetName(), Labels: obj.GetLabels()}}
		}
		objects = append(objects, obj)
	}

	deps := vap.Deps{Namespaces: namespaces, Resolver: resolver}
	policies := []audit.Policy{
		crdrules.Compile(crd, crdrules.Options{}),
		vap.CompilePolicy(replicaPolicy, vap.Options{}).Bind([]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{replicaBinding}, deps),
		vap.CompilePolicy(teamPolicy, vap.Options{}).Bind([]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{teamBinding}, deps),
	}
	var results []audit.Result
	for _, obj := range objects {
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
		if obj.GetKind() == "Widget" {
			gvr = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
		}
		for _, p := range policies {
			results = append(results, p.Evaluate(context.Background(), gvr, obj)...)
		}
	}
	return results
}

func TestGoldenReports(t *testing.T) {
	results := goldenResults(t)
	// One result was published an hour before the scan and keeps its timestamp.
	earlier := metav1.Timestamp{Seconds: scanTime().Unix() - 3600}
	var known string
	for _, r := range results {
		if r.Resource.Name == "w1" && r.Verdict == audit.Fail {
			known = r.ID()
		}
	}
	if known == "" {
		t.Fatal("the CRD's rules do not fail w1")
	}
	got := BuildCounted(results, nil, map[string]metav1.Timestamp{known: earlier}, scanTime(), Options{})
	assertGoldenReports(t, got, results, known, earlier)

	path := filepath.Join("testdata", "reports.golden.yaml")
	out := serialize(t, got)
	// The golden file is rewritten only for reports that pass the assertions above.
	if *update && !t.Failed() {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/report -run TestGoldenReports -update to create it)", err)
	}
	if !bytes.Equal(out, want) {
		t.Errorf("reports differ from %s (rerun with -update if the change is intended):\n%s", path, out)
	}
}

// goldenResult is what the golden reports must list of one result, written out by hand from the rule
// sources and objects of goldenResults, independently of the golden file.
type goldenResult struct {
	policy, rule, category, severity string
	result                           v1alpha2.PolicyResult
	message                          string
	kind, namespace, name, uid       string
	props                            map[string]string // all but resultID
	kept                             bool              // published before, at the earlier timestamp
}

type goldenReport struct {
	namespace string // "" for the ClusterPolicyReport
	summary   v1alpha2.PolicyReportSummary
	results   []goldenResult
}

// assertGoldenReports checks the reports built from results field by field against the expectations written
// below. known is the ID of the result published at earlier; every other result is stamped with the scan time,
// truncated to the second.
func assertGoldenReports(t *testing.T, got Reports, results []audit.Result, known string, earlier metav1.Timestamp) {
	t.Helper()
	const (
		crd        = "widgets.example.com"
		crdCat     = "CRD Validation"
		replicas   = "widget-replica-limit"
		team       = "require-team-label"
		vapCat     = "ValidatingAdmissionPolicy"
		widgetAPI  = "example.com/v1"
		replicaExp = "!has(object.spec.replicas) || object.spec.replicas <= 5"
	)
	want := []goldenReport{
		{
			namespace: "",
			// team-a has the label; team-b warns.
			summary: v1alpha2.PolicyReportSummary{Pass: 1, Warn: 1},
			results: []goldenResult{{
				policy: team, rule: "validations[0] (binding require-team-label-warn)", category: vapCat, severity: "high", result: v1alpha2.StatusWarn,
				message: "namespaces need a team label",
				kind:    "Namespace", name: "team-b", uid: "uid-ns-team-b",
				props: map[string]string{
					"binding": "require-team-label-warn", "validationActions": "Warn", "operation": "CREATE",
					"reason": "Forbidden", "rule": "has(object.metadata.labels) && 'team' in object.metadata.labels",
				},
			}},
		},
		{
			namespace: "team-a",
			// w1: fails the CRD, passes the VAP. w2: passes both, its transition rule skipped. w3: passes the CRD,
			// fails the VAP.
			summary: v1alpha2.PolicyReportSummary{Pass: 4, Fail: 2, Skip: 1},
			results: []goldenResult{
				{
					policy: crd, rule: "spec.replicas.x-kubernetes-validations[0] (version v1)", category: crdCat, severity: "medium",
					result:  v1alpha2.StatusFail,
					message: "spec.replicas: Invalid value: -1: replicas must not be negative",
					kind:    "Widget", namespace: "team-a", name: "w1", uid: "uid-w1",
					props: map[string]string{
						"crdVersion": "v1", "fieldPath": "spec.replicas", "reason": "FieldValueInvalid", "rule": "self >= 0",
					},
					kept: true,
				},
				{
					policy: crd, rule: "spec.id.x-kubernetes-validations[0] (version v1)", category: crdCat, severity: "medium",
					result:  v1alpha2.StatusSkip,
					message: "transition rule (uses oldSelf) is only evaluated on update; a stored object has no previous version",
					kind:    "Widget", namespace: "team-a", name: "w2", uid: "uid-w2",
					props: map[string]string{"crdVersion": "v1", "fieldPath": "spec.id", "rule": "self == oldSelf"},
				},
				{
					policy: replicas, rule: "validations[0] (binding widget-replica-limit-deny)", category: vapCat, severity: "medium", result: v1alpha2.StatusFail,
					message: "replicas must be at most 5, got 9",
					kind:    "Widget", namespace: "team-a", name: "w3", uid: "uid-w3",
					props: map[string]string{
						"binding": "widget-replica-limit-deny", "validationActions": "Deny", "operation": "CREATE",
						"reason": "Invalid", "rule": replicaExp,
					},
				},
			},
		},
		{
			namespace: "team-b",
			// w4: the CRD's size rule divides by zero, the VAP passes. w5: fails the CRD's mode rule, passes the VAP.
			summary: v1alpha2.PolicyReportSummary{Pass: 2, Fail: 1, Error: 1},
			results: []goldenResult{
				{
					policy: crd, rule: "spec.x-kubernetes-validations[1] (version v1)", category: crdCat, severity: "medium",
					result:  v1alpha2.StatusError,
					message: "spec: Invalid value: \"object\": division by zero evaluating rule: size must be at least the divisor",
					kind:    "Widget", namespace: "team-b", name: "w4", uid: "uid-w4",
					props: map[string]string{
						"crdVersion": "v1", "fieldPath": "spec", "reason": "FieldValueInvalid",
						"rule": "!has(self.size) || self.size / self.divisor >= 1",
					},
				},
				{
					policy: crd, rule: "spec.x-kubernetes-validations[0] (version v1)", category: crdCat, severity: "medium",
					result:  v1alpha2.StatusFail,
					message: "spec: Invalid value: mode legacy is retired",
					kind:    "Widget", namespace: "team-b", name: "w5", uid: "uid-w5",
					props: map[string]string{
						"crdVersion": "v1", "fieldPath": "spec", "reason": "FieldValueInvalid",
						"rule": "!has(self.mode) || self.mode != 'legacy'",
					},
				},
			},
		},
	}

	var reports []goldenReport
	var listed [][]v1alpha2.PolicyReportResult
	for _, r := range got.ClusterPolicyReports {
		if r.Name != "celaudit" || r.Namespace != "" || r.Kind != "ClusterPolicyReport" || !IsManaged(&r) {
			t.Errorf("cluster report %s/%s of kind %q, managed %v: want celaudit, managed", r.Namespace, r.Name, r.Kind, IsManaged(&r))
		}
		reports = append(reports, goldenReport{summary: r.Summary})
		listed = append(listed, r.Results)
	}
	for _, r := range got.PolicyReports {
		if r.Name != "celaudit" || r.Kind != "PolicyReport" || !IsManaged(&r) {
			t.Errorf("report %s/%s of kind %q, managed %v: want celaudit, managed", r.Namespace, r.Name, r.Kind, IsManaged(&r))
		}
		reports = append(reports, goldenReport{namespace: r.Namespace, summary: r.Summary})
		listed = append(listed, r.Results)
	}
	if len(reports) != len(want) {
		t.Fatalf("got %d reports, want %d", len(reports), len(want))
	}
	ids := map[string]bool{}
	for _, r := range results {
		ids[r.ID()] = true
	}
	for i, w := range want {
		g := reports[i]
		if g.namespace != w.namespace || g.summary != w.summary {
			t.Errorf("report %d: namespace %q, summary %+v; want %q, %+v", i, g.namespace, g.summary, w.namespace, w.summary)
		}
		if len(listed[i]) != len(w.results) {
			t.Errorf("report %q lists %d results, want %d", g.namespace, len(listed[i]), len(w.results))
			continue
		}
		for j, wr := range w.results {
			r := listed[i][j]
			at := func(field string, got, want any) {
				if got != want {
					t.Errorf("report %q, result %d (%s on %s): %s = %v, want %v", w.namespace, j, wr.rule, wr.name, field, got, want)
				}
			}
			at("source", r.Source, "celaudit")
			at("policy", r.Policy, wr.policy)
			at("rule", r.Rule, wr.rule)
			at("category", r.Category, wr.category)
			at("severity", string(r.Severity), wr.severity)
			at("result", r.Result, wr.result)
			at("scored", r.Scored, true)
			at("message", r.Message, wr.message)
			if len(r.Resources) != 1 {
				t.Errorf("report %q, result %d: resources %+v, want one", w.namespace, j, r.Resources)
			} else {
				at("resource", r.Resources[0], corev1.ObjectReference{
					APIVersion: map[string]string{"Widget": widgetAPI, "Namespace": "v1"}[wr.kind],
					Kind:       wr.kind, Namespace: wr.namespace, Name: wr.name, UID: types.UID(wr.uid),
				})
			}
			id := r.Properties[audit.PropResultID]
			if !ids[id] {
				t.Errorf("report %q, result %d: resultID %q is the ID of no result", w.namespace, j, id)
			}
			props := map[string]string{}
			for k, v := range r.Properties {
				if k != audit.PropResultID {
					props[k] = v
				}
			}
			// fmt prints maps sorted by key.
			at("properties", fmt.Sprint(props), fmt.Sprint(wr.props))
			// The scan time, truncated to the second.
			wantTS := metav1.Timestamp{Seconds: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Unix()}
			if wr.kept {
				wantTS = earlier
				at("resultID", id, known)
			}
			at("timestamp", r.Timestamp, wantTS)
		}
	}
}
