package chart_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// The objects both chart-identity scenarios audit: in namespace auditNS, a Widget (a CRD of group
// widgetGroup) stored before its CRD got the rule it breaks, and a ConfigMap that a ValidatingAdmissionPolicy
// on ConfigMaps warns about.
const (
	auditNS     = "team-a"
	widgetGroup = "example.com"
	widgetCRD   = "widgets." + widgetGroup
	widgetMsg   = "replicas must be at most 5"
	cmPolicy    = "configmaps-need-owner"
	cmMsg       = "an owner label is required"
)

// Results of the audit, as "verdict policy object" lines.
var (
	widgetFails = "fail " + widgetCRD + " big"
	cmWarns     = "warn " + cmPolicy + " no-owner"
)

// TestChartIdentityWildcard runs the operator as the chart installs it by default: the chart's ServiceAccount
// with the RBAC it renders (a token from the TokenRequest API) and the Deployment's arguments. The rendered
// access and arguments suffice: CRs of any group and ConfigMaps are audited and the reports are written.
func TestChartIdentityWildcard(t *testing.T) {
	env := envtestutil.StartForTest(t)
	inst := env.ChartIdentity(t)
	if !slices.Contains(inst.Args, "--leader-elect") {
		t.Fatalf("the default chart runs without leader election (args %v): this test would not prove its Role", inst.Args)
	}
	seedAudited(t, env)
	counter := &envtestutil.RequestCounter{}
	op, _ := envtestutil.StartOperator(t, counter.Wrap(inst.Config), inst.Options(t))
	envtestutil.WaitSettled(t, op)
	expectResults(t, env, auditNS, widgetFails, cmWarns)
	expectClusterErrors(t, env, nil)
	if refused := counter.WithStatus(http.StatusForbidden); len(refused) > 0 {
		t.Errorf("requests refused to %s: %v", inst.Identity, refused)
	}
	// The wildcard grants Secrets too: whether they are audited is --audit-secrets.
	if !mayListSecrets(t, env, inst.Identity) {
		t.Errorf("the wildcard form does not let %s list Secrets", inst.Identity)
	}
}

// TestChartIdentityRestricted runs the operator as the chart installs it with rbac.readAccess=restricted:
// built-in kinds are audited, Secrets cannot be read, and a CRD group nobody granted gets one error result
// and one Warning Event naming the missing permission and the label that grants it, with backed-off retries
// and the rest of the audit unaffected. Creating a labelled ClusterRole, aggregated into the chart's reader
// ClusterRole, starts the audit of the group without a restart.
func TestChartIdentityRestricted(t *testing.T) {
	env := envtestutil.StartForTest(t)
	env.AggregateClusterRoles(t)
	inst := env.ChartIdentity(t, "--set", "rbac.readAccess=restricted")
	seedAudited(t, env)

	if mayListSecrets(t, env, inst.Identity) {
		t.Errorf("the restricted form lets %s list Secrets", inst.Identity)
	}
	sa, err := client.New(inst.Config, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := sa.List(context.Background(), &corev1.SecretList{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Secrets as %s: %v, want Forbidden", inst.Identity, err)
	}

	opts := inst.Options(t)
	// Retries 200 ms apart at first, then at most 2 s apart: a grant takes effect within 2 s.
	opts.ReadBackoff, opts.MaxReadBackoff = 200*time.Millisecond, 2*time.Second
	counter := &envtestutil.RequestCounter{}
	started := time.Now()
	op, _ := envtestutil.StartOperator(t, counter.Wrap(inst.Config), opts)
	envtestutil.WaitSettled(t, op)

	// Not stalled by the unreadable group: the ConfigMap is audited.
	expectResults(t, env, auditNS, cmWarns)
	const cause = `forbidden: missing permission to list and watch "widgets" in API group "example.com"; ` +
		`to grant it, create a ClusterRole labelled celaudit.io/aggregate-to-reader: "true" with a rule allowing get, list and watch on it; ` +
		`celaudit reads it within 2s, without a restart (widgets.example.com is forbidden: User "system:serviceaccount:celaudit-system:celaudit-controller-manager" ` +
		`cannot list resource "widgets" in API group "example.com" at the cluster scope)`
	expectClusterErrors(t, env, []string{"error " + widgetCRD + " read (example.com/v1/widgets): cannot read example.com/v1/widgets: " + cause})
	unreadable := expectEvents(t, env, corev1.EventTypeWarning, controllers.ReasonResourceUnreadable, 1)
	if want := "Cannot read example.com/v1/widgets, so its objects are not audited: " + cause; unreadable[0] != want {
		t.Errorf("Warning Event note\n %q\nwant\n %q", unreadable[0], want)
	}

	// Retried with backoff, not in a loop: after the first read, waits of 0.2, 0.4, 0.8 and 1.6 s, then 2 s,
	// so the eighth LIST comes at least 9 s after the operator started (about 1.4 s with a fixed wait).
	const lists = 8
	envtestutil.Eventually(t, time.Minute, func() error {
		if n := counter.StatusIn("list", "widgets", "", http.StatusForbidden); n < lists {
			return fmt.Errorf("%d forbidden LISTs of widgets, waiting for %d", n, lists)
		}
		return nil
	})
	if elapsed, least := time.Since(started), 9*time.Second; elapsed < least {
		t.Errorf("%d forbidden LISTs of widgets within %s of the start, want them to take at least %s", lists, elapsed.Round(time.Millisecond), least)
	}

	// A team grants read on its group with one labelled ClusterRole; the aggregation reaches the operator,
	// which audits the widgets at its next retry, at most 2 s later. Without that bound the next wait would
	// be 25.6 s.
	grant := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "example-com-celaudit-read", Labels: map[string]string{controllers.ReaderAggregationLabel: "true"}},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{widgetGroup}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}},
	}
	granted := time.Now()
	if err := env.Client.Create(context.Background(), grant); err != nil {
		t.Fatal(err)
	}
	expectResults(t, env, auditNS, widgetFails, cmWarns)
	if took, most := time.Since(granted), opts.MaxReadBackoff+10*time.Second; took > most {
		t.Errorf("the widgets were audited %s after the grant, want within %s", took.Round(time.Millisecond), most)
	}
	expectClusterErrors(t, env, nil)
	expectEvents(t, env, corev1.EventTypeNormal, controllers.ReasonResourceReadable, 1)
	// One Warning Event for the whole time the group was unreadable, however many retries.
	expectEvents(t, env, corev1.EventTypeWarning, controllers.ReasonResourceUnreadable, 1)
	// Nothing else was refused: the rendered RBAC covers everything else celaudit does.
	refused := counter.WithStatus(http.StatusForbidden)
	if n := refused["list widgets "]; n == 0 || len(refused) != 1 {
		t.Errorf("requests refused to %s: %v, want LISTs of widgets only", inst.Identity, refused)
	}
}

// seedAudited stores the audited objects and the policies that judge them (see auditNS).
func seedAudited(t *testing.T, env *envtestutil.Env) {
	t.Helper()
	ctx := context.Background()
	crd := intFieldCRD(widgetCRD, widgetGroup, "Widget", apiextensionsv1.NamespaceScoped, "replicas")
	must(t, env.Client.Create(ctx, crd))
	must(t, envtestutil.WaitEstablished(ctx, env.Client, widgetCRD))
	must(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: auditNS}}))
	for name, replicas := range map[string]int64{"big": 9, "small": 2} {
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": widgetGroup + "/v1", "kind": "Widget",
			"metadata": map[string]any{"namespace": auditNS, "name": name},
			"spec":     map[string]any{"replicas": replicas},
		}}
		must(t, envtestutil.Apply(ctx, env.Client, w))
	}
	// The rule comes after the objects, as a tightened rule does: "big" is stored and breaks it.
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd))
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.replicas <= 5", Message: widgetMsg}}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	must(t, env.Client.Update(ctx, crd))

	for name, labels := range map[string]map[string]string{"no-owner": nil, "owned": {"owner": "team-a"}} {
		must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: auditNS, Name: name, Labels: labels}}))
	}
	must(t, env.Client.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: cmPolicy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "has(object.metadata.labels) && 'owner' in object.metadata.labels", Message: cmMsg,
			}},
		},
	}))
	must(t, env.Client.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: cmPolicy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        cmPolicy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: auditNS},
			}},
		},
	}))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// expectResults waits until the results the reports of namespace ns list are want ("verdict policy object").
func expectResults(t *testing.T, env *envtestutil.Env, ns string, want ...string) {
	t.Helper()
	slices.Sort(want)
	envtestutil.Eventually(t, time.Minute, func() error {
		var reports v1alpha2.PolicyReportList
		if err := env.Client.List(context.Background(), &reports, client.InNamespace(ns)); err != nil {
			return err
		}
		var got []string
		for _, r := range reports.Items {
			for _, res := range r.Results {
				name := ""
				if len(res.Resources) > 0 {
					name = res.Resources[0].Name
				}
				got = append(got, fmt.Sprintf("%s %s %s", res.Result, res.Policy, name))
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("results in namespace %s:\n got %q\nwant %q", ns, got, want)
		}
		return nil
	})
}

// expectClusterErrors waits until the error results of the cluster reports are want ("error policy rule:
// message").
func expectClusterErrors(t *testing.T, env *envtestutil.Env, want []string) {
	t.Helper()
	envtestutil.Eventually(t, time.Minute, func() error {
		var reports v1alpha2.ClusterPolicyReportList
		if err := env.Client.List(context.Background(), &reports); err != nil {
			return err
		}
		var got []string
		for _, r := range reports.Items {
			for _, res := range r.Results {
				if res.Result == v1alpha2.StatusError {
					got = append(got, fmt.Sprintf("%s %s %s: %s", res.Result, res.Policy, res.Rule, res.Message))
				}
			}
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("error results of the cluster reports:\n got %q\nwant %q", got, want)
		}
		return nil
	})
}

// expectEvents waits until the Events of the given type and reason about the widgets CRD are n, and returns
// their notes.
func expectEvents(t *testing.T, env *envtestutil.Env, eventType, reason string, n int) []string {
	t.Helper()
	var notes []string
	envtestutil.Eventually(t, time.Minute, func() error {
		var events eventsv1.EventList
		if err := env.Client.List(context.Background(), &events); err != nil {
			return err
		}
		notes = nil
		for _, e := range events.Items {
			if e.Regarding.Kind == "CustomResourceDefinition" && e.Regarding.Name == widgetCRD && e.Type == eventType && e.Reason == reason {
				notes = append(notes, e.Note)
			}
		}
		if len(notes) != n {
			return fmt.Errorf("%d %s Events %s about CRD %s, want %d: %q", len(notes), eventType, reason, widgetCRD, n, notes)
		}
		return nil
	})
	return notes
}

// mayListSecrets asks the API server's authorizer whether the identity may list Secrets everywhere.
func mayListSecrets(t *testing.T, env *envtestutil.Env, id envtestutil.Identity) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               id.Username(),
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + id.Namespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"},
	}}
	must(t, env.Client.Create(context.Background(), review))
	return review.Status.Allowed
}

// intFieldCRD is a CRD named name ("<plural>.<group>") of kind, served and stored as v1, whose spec has one
// integer field.
func intFieldCRD(name, group, kind string, scope apiextensionsv1.ResourceScope, field string) *apiextensionsv1.CustomResourceDefinition {
	plural, singular := strings.ToLower(kind)+"s", strings.ToLower(kind)
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: singular, Kind: kind, ListKind: kind + "List"},
			Scope: scope,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{field: {Type: "integer"}}},
					},
				}},
			}},
		},
	}
}
