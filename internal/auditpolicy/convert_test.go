package auditpolicy

import (
	"maps"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/report"
)

// fullPolicy returns an AuditPolicy with every field set, modified by opts.
func fullPolicy(opts ...func(*v1alpha1.AuditPolicy)) *v1alpha1.AuditPolicy {
	ap := &v1alpha1.AuditPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas", UID: "uid-1", Generation: 3,
			Annotations: map[string]string{"celaudit.io/rescan": "1", "other": "x"}},
		Spec: v1alpha1.AuditPolicySpec{
			ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				}}}},
			Validations:      []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= int(params.data.max)", Message: "too many"}},
			FailurePolicy:    ptr.To(admissionregistrationv1.Ignore),
			AuditAnnotations: []admissionregistrationv1.AuditAnnotation{{Key: "k", ValueExpression: "'v'"}},
			MatchConditions:  []admissionregistrationv1.MatchCondition{{Name: "c", Expression: "true"}},
			Variables:        []admissionregistrationv1.Variable{{Name: "v", Expression: "1"}},
			ParamRef:         &admissionregistrationv1.ParamRef{Name: "limits", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
			MatchResources:   &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
			Category:         "Capacity",
			Severity:         "high",
			Description:      "Keeps replicas in bounds",
			Enforcement:      v1alpha1.Warn,
		},
	}
	for _, o := range opts {
		o(ap)
	}
	return ap
}

func TestToAdmission(t *testing.T) {
	ap := fullPolicy()
	a := ToAdmission(ap, Exemptions{})
	if a.Policy.Name != "celaudit-replicas" || a.Binding.Name != "celaudit-replicas" || a.Binding.Spec.PolicyName != "celaudit-replicas" {
		t.Errorf("names: policy %q binding %q policyName %q", a.Policy.Name, a.Binding.Name, a.Binding.Spec.PolicyName)
	}
	if a.Policy.UID != "uid-1" || a.Policy.Generation != 3 {
		t.Errorf("uid/generation not carried: %q %d", a.Policy.UID, a.Policy.Generation)
	}
	if got := a.Policy.Labels[LabelAuditPolicy]; got != "replicas" {
		t.Errorf("label %s = %q", LabelAuditPolicy, got)
	}
	wantAnn := map[string]string{"celaudit.io/rescan": "1", "celaudit.io/category": "Capacity", "celaudit.io/severity": "high",
		"audit.celaudit.io/description": "Keeps replicas in bounds"}
	if !equality.Semantic.DeepEqual(a.Policy.Annotations, wantAnn) {
		t.Errorf("annotations = %v, want %v", a.Policy.Annotations, wantAnn)
	}
	if *a.Policy.Spec.FailurePolicy != admissionregistrationv1.Ignore || a.Policy.Spec.Validations[0].Message != "too many" ||
		a.Policy.Spec.ParamKind.Kind != "ConfigMap" || len(a.Policy.Spec.MatchConditions) != 1 || len(a.Policy.Spec.Variables) != 1 ||
		len(a.Policy.Spec.AuditAnnotations) != 1 || a.Policy.Spec.MatchConstraints.ResourceRules[0].Resources[0] != "deployments" {
		t.Errorf("policy spec not moved: %+v", a.Policy.Spec)
	}
	if a.Binding.Spec.ParamRef.Name != "limits" || a.Binding.Spec.MatchResources.NamespaceSelector.MatchLabels["team"] != "a" {
		t.Errorf("binding spec not moved: %+v", a.Binding.Spec)
	}
	// Nothing is shared: editing the result leaves the AuditPolicy alone.
	a.Policy.Spec.Validations[0].Message = "changed"
	if ap.Spec.Validations[0].Message != "too many" {
		t.Error("ToAdmission shares the validations with the AuditPolicy")
	}
}

func TestActions(t *testing.T) {
	for _, tc := range []struct {
		enforcement v1alpha1.Enforcement
		want        admissionregistrationv1.ValidationAction
	}{
		{"", admissionregistrationv1.Audit},
		{v1alpha1.Audit, admissionregistrationv1.Audit},
		{v1alpha1.Warn, admissionregistrationv1.Warn},
		{v1alpha1.Deny, admissionregistrationv1.Deny},
	} {
		ap := fullPolicy(func(ap *v1alpha1.AuditPolicy) { ap.Spec.Enforcement = tc.enforcement })
		got := ToAdmission(ap, Exemptions{}).Binding.Spec.ValidationActions
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%q: actions %v, want [%s]", tc.enforcement, got, tc.want)
		}
	}
}

// TestToAdmissionMovesEverything checks that every field of an AuditPolicy's spec reaches the pair it stands
// for, as written (the exemptions are tested by TestExemptionsApplied): the expected pair is written out field by field.
func TestToAdmissionMovesEverything(t *testing.T) {
	rules := []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
	}}}
	wantPolicy := admissionregistrationv1.ValidatingAdmissionPolicySpec{
		ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
		MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: rules},
		Validations:      []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= int(params.data.max)", Message: "too many"}},
		FailurePolicy:    ptr.To(admissionregistrationv1.Ignore),
		AuditAnnotations: []admissionregistrationv1.AuditAnnotation{{Key: "k", ValueExpression: "'v'"}},
		MatchConditions:  []admissionregistrationv1.MatchCondition{{Name: "c", Expression: "true"}},
		Variables:        []admissionregistrationv1.Variable{{Name: "v", Expression: "1"}},
	}
	for _, tc := range []struct {
		enforcement v1alpha1.Enforcement
		expand      bool
		actions     []admissionregistrationv1.ValidationAction
		annotations map[string]string
	}{
		{v1alpha1.Audit, false, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}, nil},
		{v1alpha1.Warn, true, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn},
			map[string]string{"celaudit.io/expand-pod-templates": "true"}},
		{v1alpha1.Deny, false, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, nil},
	} {
		a := toAdmission(fullPolicy(func(ap *v1alpha1.AuditPolicy) {
			ap.Spec.Enforcement = tc.enforcement
			ap.Spec.ExpandPodTemplates = tc.expand
		}))
		wantBinding := admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "celaudit-replicas",
			ParamRef:          &admissionregistrationv1.ParamRef{Name: "limits", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
			ValidationActions: tc.actions,
		}
		wantAnnotations := map[string]string{"celaudit.io/rescan": "1", "celaudit.io/category": "Capacity", "celaudit.io/severity": "high",
			"audit.celaudit.io/description": "Keeps replicas in bounds"}
		maps.Copy(wantAnnotations, tc.annotations)
		if !equality.Semantic.DeepEqual(a.Policy.Spec, wantPolicy) || !equality.Semantic.DeepEqual(a.Binding.Spec, wantBinding) ||
			!equality.Semantic.DeepEqual(a.Policy.Annotations, wantAnnotations) {
			t.Errorf("%s, expand %v: ToAdmission =\n%+v\n%+v\n%v\nwant\n%+v\n%+v\n%v", tc.enforcement, tc.expand,
				a.Policy.Spec, a.Binding.Spec, a.Policy.Annotations, wantPolicy, wantBinding, wantAnnotations)
		}
	}
}

func TestOwned(t *testing.T) {
	a := Owned(fullPolicy(), Exemptions{})
	for _, m := range []metav1.ObjectMeta{a.Policy.ObjectMeta, a.Binding.ObjectMeta} {
		if m.UID != "" || m.Generation != 0 {
			t.Errorf("%s keeps uid %q generation %d", m.Name, m.UID, m.Generation)
		}
		if len(m.OwnerReferences) != 1 || m.OwnerReferences[0].UID != "uid-1" || m.OwnerReferences[0].Kind != "AuditPolicy" ||
			!ptr.Deref(m.OwnerReferences[0].Controller, false) {
			t.Errorf("%s owner references = %+v", m.Name, m.OwnerReferences)
		}
		if m.Labels[report.ManagedByLabel] != report.ManagedByValue {
			t.Errorf("%s labels = %v", m.Name, m.Labels)
		}
	}
}

func TestOwnerAmong(t *testing.T) {
	a := &v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-a"}}
	b := &v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "uid-b"}}
	aps := []*v1alpha1.AuditPolicy{a, b}
	ref := func(apiVersion, kind, name, uid string, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(controller)}
	}
	cases := []struct {
		name   string
		labels map[string]string
		refs   []metav1.OwnerReference
		want   *v1alpha1.AuditPolicy
	}{
		{name: "the pair celaudit registers", refs: Owned(b, Exemptions{}).Policy.OwnerReferences, want: b},
		{name: "a label alone owns nothing", labels: map[string]string{LabelAuditPolicy: "a"}},
		{name: "a reference to a gone AuditPolicy of that name", refs: []metav1.OwnerReference{ref("audit.celaudit.io/v1alpha1", "AuditPolicy", "a", "uid-old", true)}},
		{name: "a reference naming another's uid", refs: []metav1.OwnerReference{ref("audit.celaudit.io/v1alpha1", "AuditPolicy", "a", "uid-b", true)}},
		{name: "not the controller", refs: []metav1.OwnerReference{ref("audit.celaudit.io/v1alpha1", "AuditPolicy", "a", "uid-a", false)}},
		{name: "another group's AuditPolicy", refs: []metav1.OwnerReference{ref("example.com/v1", "AuditPolicy", "a", "uid-a", true)}},
		{name: "a label and the reference of another", labels: map[string]string{LabelAuditPolicy: "b"},
			refs: []metav1.OwnerReference{ref("audit.celaudit.io/v1alpha1", "AuditPolicy", "a", "uid-a", true)}, want: a},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "celaudit-a", Labels: tc.labels, OwnerReferences: tc.refs}}
			if got := OwnerAmong(obj, aps); got != tc.want {
				t.Errorf("OwnerAmong = %v, want %v", got, tc.want)
			}
		})
	}
}
