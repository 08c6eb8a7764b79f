package differential

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/internal/views"
)

// The namespaces of the pod template comparison: ptNamespace is selected by the bindings that select
// namespaces, ptOffNamespace is not.
const (
	ptNamespace    = "pt-on"
	ptOffNamespace = "pt-off"
	// ptPolicyLabel confines each policy to the Pods made from its own workloads' templates, so that the
	// policies run in parallel without judging one another's Pods.
	ptPolicyLabel = "celaudit.io/pt-policy"
	// ptSelectLabel is the namespace label the namespace-selecting bindings select.
	ptSelectLabel = "celaudit.io/pt-select"
)

// The comparison must keep at least this much coverage.
const (
	ptMinScenarios = 60
	ptMinDenied    = 25
	ptMinAdmitted  = 25
)

// ptKind is a workload kind and how to store a workload of it around a pod template.
type ptKind struct {
	name     string
	resource schema.GroupVersionResource
	// batch kinds need a restartPolicy other than Always.
	batch bool
	build func(namespace, name string, template corev1.PodTemplateSpec) client.Object
}

func ptKinds() []ptKind {
	selector := func(template corev1.PodTemplateSpec) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"pt-case": template.Labels["pt-case"]}}
	}
	meta := func(namespace, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: namespace, Name: name}
	}
	return []ptKind{{
		name: "Deployment", resource: appsv1.SchemeGroupVersion.WithResource("deployments"),
		build: func(ns, name string, tpl corev1.PodTemplateSpec) client.Object {
			return &appsv1.Deployment{ObjectMeta: meta(ns, name), Spec: appsv1.DeploymentSpec{Selector: selector(tpl), Template: tpl}}
		},
	}, {
		name: "StatefulSet", resource: appsv1.SchemeGroupVersion.WithResource("statefulsets"),
		build: func(ns, name string, tpl corev1.PodTemplateSpec) client.Object {
			return &appsv1.StatefulSet{ObjectMeta: meta(ns, name), Spec: appsv1.StatefulSetSpec{Selector: selector(tpl), Template: tpl}}
		},
	}, {
		name: "DaemonSet", resource: appsv1.SchemeGroupVersion.WithResource("daemonsets"),
		build: func(ns, name string, tpl corev1.PodTemplateSpec) client.Object {
			return &appsv1.DaemonSet{ObjectMeta: meta(ns, name), Spec: appsv1.DaemonSetSpec{Selector: selector(tpl), Template: tpl}}
		},
	}, {
		name: "ReplicaSet", resource: appsv1.SchemeGroupVersion.WithResource("replicasets"),
		build: func(ns, name string, tpl corev1.PodTemplateSpec) client.Object {
			return &appsv1.ReplicaSet{ObjectMeta: meta(ns, name), Spec: appsv1.ReplicaSetSpec{Selector: selector(tpl), Template: tpl}}
		},
	}, {
		name: "Job", resource: batchv1.SchemeGroupVersion.WithResource("jobs"), batch: true,
		build: func(ns, name string, tpl corev1.PodTemplateSpec) client.Object {
			return &batchv1.Job{ObjectMeta: meta(ns, name), Spec: batchv1.JobSpec{Template: tpl}}
		},
	}, {
		name: "CronJob", resource: batchv1.SchemeGroupVersion.WithResource("cronjobs"), batch: true,
		build: func(ns, name string, tpl corev1.PodTemplateSpec) client.Object {
			return &batchv1.CronJob{ObjectMeta: meta(ns, name), Spec: batchv1.CronJobSpec{
				Schedule:    "0 3 * * *",
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tpl}},
			}}
		},
	}}
}

// ptPolicy is one policy on Pods and the templates it is compared on.
type ptPolicy struct {
	name     string
	spec     admissionregistrationv1.ValidatingAdmissionPolicySpec
	bindings []admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec
	params   []client.Object
	// probe is a variant the apiserver denies, with a denial containing probeText once the policy, its
	// bindings and params are in effect.
	probe     string
	probeText string
	variants  []ptVariant
}

// ptVariant is a pod template, stored in a workload of every kind.
type ptVariant struct {
	name      string
	namespace string // ptNamespace when empty
	// expect is what both must say: "deny" (the apiserver denies the Pod, the audit fails the
	// template) or "admit" (the apiserver admits the Pod, the audit has no fail, warn or error).
	expect string
	// verdicts is the audit's verdicts, sorted, or "none".
	verdicts string
	template func(t *corev1.PodTemplateSpec)
}

func container(name, image string) corev1.Container {
	return corev1.Container{Name: name, Image: image}
}

func ptPolicies() []ptPolicy {
	podRules := &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		},
	}}}
	deny := []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	denyBinding := admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{ValidationActions: deny}
	const privileged = "has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged"
	return []ptPolicy{{
		name: "pt-images",
		spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: podRules.DeepCopy(),
			Validations: []admissionregistrationv1.Validation{
				{Expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))", Message: "images must not use the latest tag"},
				{
					Expression:        "!has(object.spec.initContainers) || object.spec.initContainers.all(c, c.image.startsWith('registry.example/'))",
					MessageExpression: "'init containers of ' + object.metadata.generateName + ' pull from elsewhere: ' + object.spec.initContainers.map(c, c.image).join(', ')",
				},
			},
		},
		bindings:  []admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{denyBinding},
		probe:     "latest",
		probeText: "images must not use the latest tag",
		variants: []ptVariant{
			{name: "pinned", expect: "admit", verdicts: "pass", template: func(t *corev1.PodTemplateSpec) {}},
			{name: "latest", expect: "deny", verdicts: "fail", template: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers = append(t.Spec.Containers, container("side", "busybox:latest"))
			}},
			{name: "init", expect: "deny", verdicts: "fail", template: func(t *corev1.PodTemplateSpec) {
				t.Spec.InitContainers = []corev1.Container{container("a", "registry.example/init:1"), container("b", "docker.io/init:2")}
			}},
		},
	}, {
		name: "pt-privileged",
		spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: podRules.DeepCopy(),
			Validations: []admissionregistrationv1.Validation{{
				Expression:        "!object.spec.containers.exists(c, " + privileged + ")",
				MessageExpression: "'privileged containers: ' + object.spec.containers.filter(c, " + privileged + ").map(c, c.name).join(', ')",
				Reason:            ptr.To(metav1.StatusReasonForbidden),
			}},
		},
		bindings:  []admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{denyBinding},
		probe:     "privileged",
		probeText: "privileged containers: c",
		variants: []ptVariant{
			{name: "unprivileged", expect: "admit", verdicts: "pass", template: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(false)}
			}},
			{name: "privileged", expect: "deny", verdicts: "fail", template: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			}},
		},
	}, {
		name: "pt-team",
		spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: podRules.DeepCopy(),
			Variables: []admissionregistrationv1.Variable{{
				Name: "team", Expression: "object.metadata.?labels[?'team'].orValue('')",
			}},
			Validations: []admissionregistrationv1.Validation{{
				Expression:        "variables.team != ''",
				MessageExpression: "'Pods of ' + object.metadata.generateName + ' in ' + object.metadata.namespace + ' need a team label'",
			}, {
				Expression: "!(object.metadata.?annotations[?'pt/forbidden'].hasValue())",
				Message:    "the annotation pt/forbidden is not allowed",
			}},
		},
		bindings:  []admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{denyBinding},
		probe:     "no-team",
		probeText: "need a team label",
		variants: []ptVariant{
			{name: "team", expect: "admit", verdicts: "pass", template: func(t *corev1.PodTemplateSpec) { t.Labels["team"] = "a" }},
			{name: "no-team", expect: "deny", verdicts: "fail", template: func(t *corev1.PodTemplateSpec) {}},
			{name: "forbidden", expect: "deny", verdicts: "fail", template: func(t *corev1.PodTemplateSpec) {
				t.Labels["team"] = "a"
				t.Annotations = map[string]string{"pt/forbidden": "x"}
			}},
		},
	}, {
		name: "pt-params",
		spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: podRules.DeepCopy(),
			ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			Validations: []admissionregistrationv1.Validation{{
				Expression:        "size(object.spec.containers) <= int(params.data.maxContainers)",
				MessageExpression: "'at most ' + params.data.maxContainers + ' containers, ' + object.metadata.generateName + ' has ' + string(size(object.spec.containers))",
			}},
		},
		bindings: []admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{{
			ValidationActions: deny,
			ParamRef:          &admissionregistrationv1.ParamRef{Name: "pt-limits", ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction)},
		}},
		params: []client.Object{
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ptNamespace, Name: "pt-limits"}, Data: map[string]string{"maxContainers": "1"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ptOffNamespace, Name: "pt-limits"}, Data: map[string]string{"maxContainers": "2"}},
		},
		probe:     "two",
		probeText: "at most 1 containers",
		variants: []ptVariant{
			{name: "one", expect: "admit", verdicts: "pass", template: func(t *corev1.PodTemplateSpec) {}},
			{name: "two", expect: "deny", verdicts: "fail", template: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers = append(t.Spec.Containers, container("side", "busybox:1"))
			}},
			{name: "two-elsewhere", namespace: ptOffNamespace, expect: "admit", verdicts: "pass", template: func(t *corev1.PodTemplateSpec) {
				t.Spec.Containers = append(t.Spec.Containers, container("side", "busybox:1"))
			}},
		},
	}, {
		name: "pt-hostnet",
		spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: podRules.DeepCopy(),
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "checked", Expression: "object.metadata.?annotations[?'pt/check'].orValue('') == 'true'",
			}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!object.spec.?hostNetwork.orValue(false)",
				Message:    "host network is not allowed",
			}},
		},
		bindings: []admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{{
			ValidationActions: deny,
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{ptSelectLabel: "yes"}}},
		}},
		probe:     "host",
		probeText: "host network is not allowed",
		variants: []ptVariant{
			{name: "host", expect: "deny", verdicts: "fail", template: func(t *corev1.PodTemplateSpec) {
				t.Annotations = map[string]string{"pt/check": "true"}
				t.Spec.HostNetwork = true
			}},
			{name: "pod-network", expect: "admit", verdicts: "pass", template: func(t *corev1.PodTemplateSpec) {
				t.Annotations = map[string]string{"pt/check": "true"}
			}},
			// The matchCondition excludes the Pod: the API server admits it without a word, and no result.
			{name: "unchecked", expect: "admit", verdicts: "none", template: func(t *corev1.PodTemplateSpec) { t.Spec.HostNetwork = true }},
			{name: "host-elsewhere", namespace: ptOffNamespace, expect: "admit", verdicts: "none", template: func(t *corev1.PodTemplateSpec) {
				t.Annotations = map[string]string{"pt/check": "true"}
				t.Spec.HostNetwork = true
			}},
		},
	}}
}

// TestPodTemplatesMatchAPIServer stores workloads of every kind whose pod templates keep or break Pod
// policies, then creates the policies, annotated to expand pod templates, and compares, workload by workload,
// the audit of the stored workload's template with the apiserver's answer to a server-side dry-run create of
// the Pod made from that template (its namespace, labels, annotations and spec, and a generateName): denied
// exactly when the audit fails the template, with the audit's message and reason. The rules read only what
// the stored template determines: the apiserver defaults the Pod and its admission plugins may add to it.
func TestPodTemplatesMatchAPIServer(t *testing.T) {
	ctx := t.Context()
	cl := newVAPClients(t)
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: ptNamespace, Labels: map[string]string{ptSelectLabel: "yes"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: ptOffNamespace}},
	} {
		if err := env.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	resolver, err := vapResolver(ctx, cl.discovery, nil)
	if err != nil {
		t.Fatal(err)
	}

	total := &tally[ptCounts]{}
	t.Cleanup(func() {
		got := total.get()
		if subtestFiltered() {
			t.Logf("coverage not checked, subtests are filtered: %s", got)
			return
		}
		t.Logf("compared %s", got)
		if got.scenarios < ptMinScenarios || got.denied < ptMinDenied || got.admitted < ptMinAdmitted {
			t.Errorf("comparison shrank: %s; want at least %d scenarios, %d denied, %d admitted",
				got, ptMinScenarios, ptMinDenied, ptMinAdmitted)
		}
	})
	for _, p := range ptPolicies() {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			runPTPolicy(t, cl, resolver, p, total)
		})
	}
}

// ptCounts is what the comparison covered.
type ptCounts struct{ scenarios, denied, admitted int }

func (c ptCounts) String() string {
	return fmt.Sprintf("%d workloads (%d denied, %d admitted)", c.scenarios, c.denied, c.admitted)
}

// ptWorkload is one stored workload of a variant.
type ptWorkload struct {
	kind    ptKind
	variant ptVariant
	obj     client.Object
}

// build returns the namespace, name and pod template of the variant's workload of kind, labelled for policy.
func (v ptVariant) build(policy string, kind ptKind) (namespace, name string, template corev1.PodTemplateSpec) {
	namespace = v.namespace
	if namespace == "" {
		namespace = ptNamespace
	}
	name = fmt.Sprintf("%s-%s-%s", policy, strings.ToLower(kind.name), v.name)
	template = corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{ptPolicyLabel: policy, "pt-case": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{container("c", "registry.example/app:1.0")}},
	}
	if kind.batch {
		template.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	v.template(&template)
	return namespace, name, template
}

func runPTPolicy(t *testing.T, cl *vapClients, resolver *vap.StaticResolver, p ptPolicy, total *tally[ptCounts]) {
	ctx := t.Context()
	for _, o := range p.params {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// Workloads are stored before the policy exists, as the product finds them.
	var workloads []ptWorkload
	for _, v := range p.variants {
		for _, k := range ptKinds() {
			obj := k.build(v.build(p.name, k))
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatalf("creating %s %s: %v", k.name, obj.GetName(), err)
			}
			workloads = append(workloads, ptWorkload{kind: k, variant: v, obj: obj})
		}
	}
	policy, bindings := installPTPolicy(t, p)

	// The probe's Pod is denied once the policy, its bindings and its params are in effect.
	probe := workloads[0]
	for _, w := range workloads {
		if w.variant.name == p.probe {
			probe = w
			break
		}
	}
	start := time.Now()
	for {
		pod, err := storedTemplatePod(ctx, cl.dyn, probe)
		if err != nil {
			t.Fatal(err)
		}
		ans, err := askAPIServerPod(ctx, cl.dyn, pod)
		if err != nil {
			t.Fatal(err)
		}
		if ans.denial != nil && strings.Contains(ans.denial.ErrStatus.Message, p.probeText) {
			t.Logf("probe denied after %s", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > vapProbeTimeout {
			t.Fatalf("the policy is not in effect after %s: the apiserver %s; want a denial containing %q", vapProbeTimeout, ans, p.probeText)
		}
		time.Sleep(100 * time.Millisecond)
	}

	compiled := engine.Bind(engine.Compiler{}.VAP(policy), bindings, engine.Views{
		Resources:  resolver,
		Namespaces: views.NewLiveNamespaces(ctx, cl.dyn),
		Params:     views.NewLiveParams(ctx, cl.dyn, resolver, 500),
	})
	for _, k := range ptKinds() {
		if !containsGVR(compiled.Resources(), k.resource) {
			t.Errorf("the audit does not read %v: it reads %v", k.resource, compiled.Resources())
		}
	}
	actions := map[string][]admissionregistrationv1.ValidationAction{}
	for _, b := range bindings {
		actions[b.Name] = b.Spec.ValidationActions
	}
	for _, w := range workloads {
		t.Run(w.kind.name+"/"+w.obj.GetNamespace()+"/"+w.obj.GetName(), func(t *testing.T) {
			denied := comparePTWorkload(t, cl.dyn, compiled, policy.Name, actions, w)
			total.add(func(n *ptCounts) {
				n.scenarios++
				if denied {
					n.denied++
				} else {
					n.admitted++
				}
			})
		})
	}
}

// installPTPolicy creates the policy, annotated to expand pod templates and confined to the Pods labelled
// for it, and its bindings, and returns them as the apiserver stores them. They are deleted when the test
// ends.
func installPTPolicy(t *testing.T, p ptPolicy) (*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	ctx := t.Context()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Annotations: map[string]string{audit.AnnotationExpandPodTemplates: "true"}},
		Spec:       *p.spec.DeepCopy(),
	}
	policy.Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{ptPolicyLabel: p.name}}
	objs := []client.Object{policy}
	for i, spec := range p.bindings {
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", p.name, i)},
			Spec:       *spec.DeepCopy(),
		}
		b.Spec.PolicyName = p.name
		objs = append(objs, b)
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
		t.Cleanup(func() {
			if err := env.Client.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s: %v", o.GetName(), err)
			}
		})
	}
	stored := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(policy), stored); err != nil {
		t.Fatal(err)
	}
	var bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, o := range objs[1:] {
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), b); err != nil {
			t.Fatal(err)
		}
		bindings = append(bindings, b)
	}
	return stored, bindings
}

// comparePTWorkload compares the audit of a stored workload's template with the apiserver's answer for the
// Pod made from it, and returns whether the apiserver denied it.
func comparePTWorkload(t *testing.T, dyn dynamic.Interface, compiled *vap.Policy, policy string,
	actions map[string][]admissionregistrationv1.ValidationAction, w ptWorkload,
) bool {
	ctx := t.Context()
	stored, err := dyn.Resource(w.kind.resource).Namespace(w.obj.GetNamespace()).Get(ctx, w.obj.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := templatePod(stored, w.kind)
	if err != nil {
		t.Fatal(err)
	}
	ans, err := askAPIServerPod(ctx, dyn, pod)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the apiserver %s", ans)

	results := compiled.Evaluate(ctx, w.kind.resource, stored)
	t.Logf("the audit of the template:\n%s", dumpVAPResults(results))
	for _, r := range results {
		if r.Resource != audit.RefOf(stored) || r.Properties[audit.PropPodTemplate] != "true" {
			t.Errorf("result %s %q is reported on %+v with podTemplate %q; want the workload %+v and \"true\"",
				r.Verdict, r.Message, r.Resource, r.Properties[audit.PropPodTemplate], audit.RefOf(stored))
		}
	}

	want := predictAPIServer(results, func(r audit.Result) vapRoute {
		binding := r.Properties[audit.PropBinding]
		return vapRoute{policy: policy, binding: binding, actions: actions[binding]}
	})
	switch {
	case ans.denial == nil && len(want.denials) > 0:
		t.Errorf("verdicts differ: the apiserver admits the Pod, the audit predicts the denial\n  %s", strings.Join(want.denialTexts(), "\n  "))
	case ans.denial != nil && len(want.denials) == 0:
		t.Errorf("verdicts differ: the apiserver denies the Pod, the audit predicts no denial\n  apiserver: %s", ans.denial.ErrStatus.Message)
	case ans.denial != nil:
		text := ans.denial.ErrStatus.Message
		// The Pod has no name yet (generateName): the apiserver names it by what it has.
		i := strings.Index(text, "ValidatingAdmissionPolicy '")
		if !strings.HasPrefix(text, "pods ") || i < 0 {
			t.Errorf("the apiserver's denial is not a policy's denial of a Pod: %s", text)
			break
		}
		d, ok := want.match(want.denials, text[i:], "")
		if !ok {
			t.Errorf("messages differ\n  apiserver: %s\n  audit:     %s", text[i:], strings.Join(want.denialTexts(), "\n             "))
			break
		}
		if got := string(ans.denial.ErrStatus.Reason); got != d.reason {
			t.Errorf("the apiserver denies with reason %s, the audit's result has reason %s", got, d.reason)
		}
	}

	// The fixture's expectation, so that a fixture that no longer tests what it says is caught.
	var verdicts []string
	bad := 0
	for _, r := range results {
		verdicts = append(verdicts, string(r.Verdict))
		if r.Verdict == audit.Fail || r.Verdict == audit.Warn || r.Verdict == audit.Error {
			bad++
		}
	}
	got := strings.Join(sortedUnique(verdicts), ",")
	if got == "" {
		got = "none"
	}
	if got != w.variant.verdicts {
		t.Errorf("the audit's verdicts are %s, the fixture expects %s", got, w.variant.verdicts)
	}
	denied := ans.denial != nil
	if (w.variant.expect == "deny") != denied || (w.variant.expect == "deny") != (bad > 0) {
		t.Errorf("the fixture expects %s; the apiserver %s; the audit's verdicts are %s", w.variant.expect, ans, got)
	}
	return denied
}

// storedTemplatePod reads w back and returns the Pod made from its stored template.
func storedTemplatePod(ctx context.Context, dyn dynamic.Interface, w ptWorkload) (*unstructured.Unstructured, error) {
	stored, err := dyn.Resource(w.kind.resource).Namespace(w.obj.GetNamespace()).Get(ctx, w.obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return templatePod(stored, w.kind)
}

// templatePod makes the Pod a controller would create from the stored workload's template, as the API
// defines it: the workload's namespace, a generateName from its name, the template's labels, annotations
// and spec.
func templatePod(stored *unstructured.Unstructured, kind ptKind) (*unstructured.Unstructured, error) {
	path := []string{"spec", "template"}
	if kind.name == "CronJob" {
		path = []string{"spec", "jobTemplate", "spec", "template"}
	}
	template, found, err := unstructured.NestedMap(stored.Object, path...)
	if err != nil {
		return nil, fmt.Errorf("reading the template of %s %s: %w", kind.name, stored.GetName(), err)
	}
	if !found {
		return nil, fmt.Errorf("%s %s has no template at %v", kind.name, stored.GetName(), path)
	}
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "spec": template["spec"]}}
	pod.SetNamespace(stored.GetNamespace())
	pod.SetGenerateName(stored.GetName() + "-")
	labels, _, _ := unstructured.NestedStringMap(template, "metadata", "labels")
	annotations, _, _ := unstructured.NestedStringMap(template, "metadata", "annotations")
	pod.SetLabels(labels)
	pod.SetAnnotations(annotations)
	return pod, nil
}

// askAPIServerPod asks the apiserver to create pod, as a server-side dry run.
func askAPIServerPod(ctx context.Context, dyn dynamic.Interface, pod *unstructured.Unstructured) (vapAnswer, error) {
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	ans := vapAnswer{resource: pods}
	_, err := dyn.Resource(pods).Namespace(pod.GetNamespace()).Create(ctx, pod.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil {
		return ans, nil
	}
	var status *apierrors.StatusError
	if errors.As(err, &status) && strings.Contains(status.ErrStatus.Message, "ValidatingAdmissionPolicy '") {
		ans.denial = status
		return ans, nil
	}
	return vapAnswer{}, fmt.Errorf("the apiserver answered neither with an admission nor with a policy's denial: %w", err)
}
