package vap

import (
	"reflect"
	"slices"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/audit"
)

// Workload resources, served by workloadResolver besides the test cluster's resources.
var (
	statefulSetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	daemonSetsGVR   = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
	replicaSetsGVR  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	jobsGVR         = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	cronJobsGVR     = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}
)

// workloadDiscovery is the test cluster's discovery with every workload resource. modify may change the
// batch/v1 list, to leave resources out or drop their verbs.
func workloadDiscovery(modify func(batch *metav1.APIResourceList)) []*metav1.APIResourceList {
	lists := discovery()
	for _, l := range lists {
		if l.GroupVersion == "apps/v1" {
			l.APIResources = append(l.APIResources,
				metav1.APIResource{Name: "statefulsets", Kind: "StatefulSet", Namespaced: true, Verbs: listVerbs},
				metav1.APIResource{Name: "daemonsets", Kind: "DaemonSet", Namespaced: true, Verbs: listVerbs},
				metav1.APIResource{Name: "replicasets", Kind: "ReplicaSet", Namespaced: true, Verbs: listVerbs},
			)
		}
	}
	batch := &metav1.APIResourceList{GroupVersion: "batch/v1", APIResources: []metav1.APIResource{
		{Name: "jobs", Kind: "Job", Namespaced: true, Verbs: listVerbs},
		{Name: "cronjobs", Kind: "CronJob", Namespaced: true, Verbs: listVerbs},
	}}
	if modify != nil {
		modify(batch)
	}
	return append(lists, batch)
}

func workloadResolver(modify func(batch *metav1.APIResourceList)) *StaticResolver {
	r, err := NewStaticResolver(workloadDiscovery(modify))
	if err != nil {
		panic(err)
	}
	return r
}

// withWorkloads is an evalCase deps option: the cluster serves every workload resource.
func withWorkloads(d *Deps) { d.Resolver = workloadResolver(nil) }

// expandingPodTemplates annotates the policy to expand pod templates.
func expandingPodTemplates(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[audit.AnnotationExpandPodTemplates] = "true"
}

const imageRule = "object.spec.containers.all(c, !c.image.endsWith(':latest'))"

// podPolicy returns a policy on CREATE and UPDATE of core v1 Pods that refuses images tagged latest,
// expanding pod templates.
func podPolicy(opts ...policyOption) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return newPolicy("p", append([]policyOption{
		withRules(rule("", "v1", "pods")),
		withValidation(imageRule, message("no latest images")),
		expandingPodTemplates,
	}, opts...)...)
}

// podTemplate returns a pod template with one container running image and the given labels.
func podTemplate(image string, labels map[string]any) map[string]any {
	t := map[string]any{
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": image}}},
	}
	if labels != nil {
		t["metadata"] = map[string]any{"labels": labels}
	}
	return t
}

// newWorkload returns a workload of kind holding template where its kind holds it (spec.template, or
// spec.jobTemplate.spec.template for a CronJob). A nil template leaves it out.
func newWorkload(kind, namespace, name string, template any, opts ...objectOption) *unstructured.Unstructured {
	apiVersion, path := "apps/v1", []string{"spec", "template"}
	switch kind {
	case "Job":
		apiVersion = "batch/v1"
	case "CronJob":
		apiVersion, path = "batch/v1", []string{"spec", "jobTemplate", "spec", "template"}
	}
	u := newObject(apiVersion, kind, namespace, name, withField("x", "spec", "marker"))
	if template != nil {
		withField(template, path...)(u)
	}
	for _, o := range opts {
		o(u)
	}
	return u
}

// templateProps are the properties of a template result of binding "b" with validationActions [Deny] on
// CREATE.
func templateProps(kv ...string) map[string]string {
	return denyProps(append([]string{audit.PropPodTemplate, "true"}, kv...)...)
}

var (
	latestFail   = row{"validations[0]", audit.Fail, "no latest images", templateProps("rule", imageRule, "reason", "Invalid")}
	templatePass = row{"validations", audit.Pass, "object satisfies the 1 validation evaluated", templateProps()}
)

func TestPodTemplateWorkloadKinds(t *testing.T) {
	kinds := []struct {
		kind string
		gvr  schema.GroupVersionResource
	}{
		{"Deployment", deploymentsGVR},
		{"StatefulSet", statefulSetsGVR},
		{"DaemonSet", daemonSetsGVR},
		{"ReplicaSet", replicaSetsGVR},
		{"Job", jobsGVR},
		{"CronJob", cronJobsGVR},
	}
	var cases []evalCase
	for _, k := range kinds {
		cases = append(cases, evalCase{
			name:   k.kind + " template that breaks the policy fails on the workload",
			policy: podPolicy(),
			deps:   withWorkloads,
			gvr:    k.gvr,
			obj:    newWorkload(k.kind, "prod", "web", podTemplate("nginx:latest", nil)),
			want:   []row{latestFail},
		}, evalCase{
			name:   k.kind + " template that keeps the policy passes on the workload",
			policy: podPolicy(),
			deps:   withWorkloads,
			gvr:    k.gvr,
			obj:    newWorkload(k.kind, "prod", "web", podTemplate("nginx:1.27", nil)),
			want:   []row{templatePass},
		}, evalCase{
			name:   k.kind + " without a template is an error on the workload",
			policy: podPolicy(),
			deps:   withWorkloads,
			gvr:    k.gvr,
			obj:    newWorkload(k.kind, "prod", "web", nil),
			want: []row{{"podTemplate", audit.Error, `cannot evaluate the pod template of ` + k.kind + ` "web": ` +
				map[bool]string{true: "spec.jobTemplate", false: "spec.template"}[k.kind == "CronJob"] + " is missing",
				props(audit.PropPodTemplate, "true")}},
		})
	}
	runCases(t, cases)
}

func TestPodTemplateCronJobNesting(t *testing.T) {
	at := func(template any, path ...string) objectOption { return withField(template, path...) }
	runCases(t, []evalCase{{
		name:   "the template of a CronJob is its job template's",
		policy: podPolicy(),
		deps:   withWorkloads,
		gvr:    cronJobsGVR,
		obj:    newWorkload("CronJob", "prod", "nightly", nil, at(podTemplate("nginx:latest", nil), "spec", "jobTemplate", "spec", "template")),
		want:   []row{latestFail},
	}, {
		name:   "a template at spec.template of a CronJob is not its template",
		policy: podPolicy(),
		deps:   withWorkloads,
		gvr:    cronJobsGVR,
		obj:    newWorkload("CronJob", "prod", "nightly", nil, at(podTemplate("nginx:1.27", nil), "spec", "template")),
		want: []row{{"podTemplate", audit.Error, `cannot evaluate the pod template of CronJob "nightly": spec.jobTemplate is missing`,
			props(audit.PropPodTemplate, "true")}},
	}, {
		name:   "a job template without a spec",
		policy: podPolicy(),
		deps:   withWorkloads,
		gvr:    cronJobsGVR,
		obj:    newWorkload("CronJob", "prod", "nightly", nil, at(map[string]any{"metadata": map[string]any{}}, "spec", "jobTemplate")),
		want: []row{{"podTemplate", audit.Error, `cannot evaluate the pod template of CronJob "nightly": spec.jobTemplate.spec is missing`,
			props(audit.PropPodTemplate, "true")}},
	}, {
		name:   "a job template that is not an object",
		policy: podPolicy(),
		deps:   withWorkloads,
		gvr:    cronJobsGVR,
		obj:    newWorkload("CronJob", "prod", "nightly", nil, at("job", "spec", "jobTemplate")),
		want: []row{{"podTemplate", audit.Error, `cannot evaluate the pod template of CronJob "nightly": spec.jobTemplate is not an object but a string`,
			props(audit.PropPodTemplate, "true")}},
	}})
}

func TestPodTemplateMalformed(t *testing.T) {
	malformed := func(msg string) []row {
		return []row{{"podTemplate", audit.Error, `cannot evaluate the pod template of Deployment "web": ` + msg, props(audit.PropPodTemplate, "true")}}
	}
	cases := []struct {
		name     string
		template any
		want     []row
	}{
		{"template is not an object", "web", malformed("spec.template is not an object but a string")},
		{"template is null", nil, malformed("spec.template is missing")},
		{"template without spec", map[string]any{"metadata": map[string]any{}}, malformed("spec.template.spec is missing")},
		{"spec is not an object", map[string]any{"spec": []any{"c"}}, malformed("spec.template.spec is not an object but an array")},
		{"metadata is not an object", map[string]any{"metadata": "m", "spec": map[string]any{}}, malformed("spec.template.metadata is not an object but a string")},
		{"labels are not an object", map[string]any{"metadata": map[string]any{"labels": true}, "spec": map[string]any{}},
			malformed("spec.template.metadata.labels is not an object but a boolean")},
		{"an annotation is not a string", map[string]any{"metadata": map[string]any{"annotations": map[string]any{"n": int64(1)}}, "spec": map[string]any{}},
			malformed(`spec.template.metadata.annotations["n"] is not a string but a number`)},
		// Only what the Pod is made of is checked: a spec the API would refuse is evaluated, as the
		// apiserver's admission evaluates it before validation.
		{"empty spec is evaluated", map[string]any{"spec": map[string]any{}}, []row{{"validations[0]", audit.Error,
			"expression '" + imageRule + "' resulted in error: no such key: containers",
			templateProps("rule", imageRule, "failurePolicy", "Fail")}}},
	}
	var evalCases []evalCase
	for _, c := range cases {
		obj := newWorkload("Deployment", "prod", "web", nil)
		if c.template != nil {
			withField(c.template, "spec", "template")(obj)
		} else {
			obj.Object["spec"].(map[string]any)["template"] = nil
		}
		evalCases = append(evalCases, evalCase{name: c.name, policy: podPolicy(), deps: withWorkloads, gvr: deploymentsGVR, obj: obj, want: c.want})
	}
	evalCases = append(evalCases, evalCase{
		name:   "spec is not an object",
		policy: podPolicy(),
		deps:   withWorkloads,
		gvr:    deploymentsGVR,
		obj:    &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "namespace": "prod"}, "spec": "s"}},
		want:   malformed("spec is not an object but a string"),
	})
	runCases(t, evalCases)
}

// TestPodTemplateIsThePod checks that the policy sees the Pod the controller would create: its kind, the
// workload's namespace, a generateName, the template's labels and annotations (not the workload's), and a
// request for a Pod.
func TestPodTemplateIsThePod(t *testing.T) {
	const podRule = "object.apiVersion == 'v1' && object.kind == 'Pod' && object.metadata.namespace == 'prod' && " +
		"object.metadata.generateName == 'web-' && !has(object.metadata.name) && !has(object.metadata.uid) && " +
		"object.metadata.labels == {'app': 'web'} && object.metadata.annotations == {'team': 'a'} && " +
		"!has(object.status) && object.spec.containers[0].image == 'nginx:1.27'"
	const requestRule = "request.kind.group == '' && request.kind.version == 'v1' && request.kind.kind == 'Pod' && " +
		"request.resource.group == '' && request.resource.version == 'v1' && request.resource.resource == 'pods' && request.namespace == 'prod' && " +
		"!has(request.name) && request.operation == 'CREATE' && oldObject == null && namespaceObject.metadata.name == 'prod'"
	template := podTemplate("nginx:1.27", map[string]any{"app": "web"})
	template["metadata"].(map[string]any)["annotations"] = map[string]any{"team": "a"}
	deployment := newWorkload("Deployment", "prod", "web", template,
		withLabels(map[string]string{"app": "other"}), withField(map[string]any{"status": "x"}, "status"))
	runCases(t, []evalCase{{
		name:   "the object and the request are the Pod's",
		policy: podPolicy(withValidation(podRule), withValidation(requestRule)),
		deps:   withWorkloads,
		obj:    deployment,
		want:   []row{{"validations", audit.Pass, "object satisfies the 3 validations evaluated", templateProps()}},
	}, {
		name: "the objectSelector selects the template's labels",
		policy: podPolicy(withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
			m.ObjectSelector = selector(map[string]string{"app": "web"})
		})),
		deps: withWorkloads,
		obj:  newWorkload("Deployment", "prod", "d", podTemplate("nginx:latest", map[string]any{"app": "web"}), withLabels(map[string]string{"app": "other"})),
		want: []row{latestFail},
	}, {
		name: "the objectSelector does not select the workload's labels",
		policy: podPolicy(withMatchConstraints(func(m *admissionregistrationv1.MatchResources) {
			m.ObjectSelector = selector(map[string]string{"app": "web"})
		})),
		deps: withWorkloads,
		obj:  newWorkload("Deployment", "prod", "d", podTemplate("nginx:latest", map[string]any{"app": "other"}), withLabels(map[string]string{"app": "web"})),
		want: nil,
	}, {
		name:   "matchConditions judge the Pod",
		policy: podPolicy(withMatchCondition("web", "object.metadata.labels.app == 'web'")),
		deps:   withWorkloads,
		obj:    newWorkload("Deployment", "prod", "d", podTemplate("nginx:latest", map[string]any{"app": "batch"})),
		want:   nil, // the Pod it would make is excluded: the API server would admit it silently
	}, {
		name:   "a messageExpression reads the Pod",
		policy: podPolicy(withValidation("false", messageExpression("object.metadata.generateName + ' runs ' + object.spec.containers[0].image"))),
		deps:   withWorkloads,
		obj:    newWorkload("Deployment", "prod", "web", podTemplate("nginx:1.27", nil)),
		want:   []row{{"validations[1]", audit.Fail, "web- runs nginx:1.27", templateProps("rule", "false", "reason", "Invalid")}},
	}, {
		name:   "an UPDATE-only policy judges the template as it judges a stored Pod",
		policy: podPolicy(withRules(rule("", "v1", "pods", admissionregistrationv1.Update))),
		deps:   withWorkloads,
		obj:    newWorkload("Deployment", "prod", "web", podTemplate("nginx:latest", nil)),
		want: []row{{"validations[0]", audit.Fail, "no latest images",
			props("binding", "b", "validationActions", "Deny", "operation", "UPDATE", "rule", imageRule, "reason", "Invalid", audit.PropPodTemplate, "true")}},
	}, {
		name:   "a panic in a template's evaluation is an error on the workload",
		policy: podPolicy(withParamKind(limitsGVK)),
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("strict"),
			notFound(admissionregistrationv1.DenyAction)))},
		deps: func(d *Deps) { withWorkloads(d); d.Params = panickingParams{} },
		obj:  newWorkload("Deployment", "prod", "web", podTemplate("nginx:1.27", nil)),
		want: []row{{"internal", audit.Error, "internal error evaluating the policy: boom", templateProps("failurePolicy", "Fail")}},
	}})
}

// TestPodTemplateBindings checks that namespace selectors, params and validation actions apply to a
// template as to a Pod in the workload's namespace.
func TestPodTemplateBindings(t *testing.T) {
	prodOnly := withMatchResources(func(m *admissionregistrationv1.MatchResources) {
		m.NamespaceSelector = selector(map[string]string{"env": "prod"})
	})
	const containersRule = "size(object.spec.containers) <= params.spec.maxReplicas"
	twoContainers := podTemplate("nginx:1.27", nil)
	twoContainers["spec"].(map[string]any)["containers"] = []any{
		map[string]any{"name": "a", "image": "a:1"}, map[string]any{"name": "b", "image": "b:1"}, map[string]any{"name": "c", "image": "c:1"},
	}
	paramPolicy := newPolicy("p", withRules(rule("", "v1", "pods")), withParamKind(limitsGVK), expandingPodTemplates,
		withValidation(containersRule, messageExpression("'at most ' + string(params.spec.maxReplicas) + ' containers'")))
	runCases(t, []evalCase{{
		name:     "a namespaceSelector that selects the workload's namespace",
		policy:   podPolicy(),
		bindings: bindings{newBinding("b", "p", prodOnly)},
		deps:     withWorkloads,
		obj:      newWorkload("Deployment", "prod", "web", podTemplate("nginx:latest", nil)),
		want:     []row{latestFail},
	}, {
		name:     "a namespaceSelector that does not select the workload's namespace",
		policy:   podPolicy(),
		bindings: bindings{newBinding("b", "p", prodOnly)},
		deps:     withWorkloads,
		obj:      newWorkload("Deployment", "dev", "web", podTemplate("nginx:latest", nil)),
		want:     nil,
	}, {
		name:     "params from the workload's namespace",
		policy:   paramPolicy,
		bindings: bindings{newBinding("b", "p", paramRef(paramRefName("strict"), notFound(admissionregistrationv1.DenyAction)))},
		deps:     withWorkloads,
		obj:      newWorkload("Deployment", "prod", "web", twoContainers),
		want: []row{{"validations[0]", audit.Fail, "at most 2 containers",
			templateProps("rule", containersRule, "reason", "Invalid", "param", "prod/strict")}},
	}, {
		name:     "params by selector, each evaluated",
		policy:   paramPolicy,
		bindings: bindings{newBinding("b", "p", paramRef(paramRefSelector(map[string]string{"tier": "limits"}), notFound(admissionregistrationv1.DenyAction)))},
		deps:     withWorkloads,
		obj:      newWorkload("Job", "prod", "web", twoContainers),
		gvr:      jobsGVR,
		want: []row{
			{"validations", audit.Pass, "object satisfies the 1 validation evaluated", templateProps("param", "prod/loose")},
			{"validations[0]", audit.Fail, "at most 2 containers", templateProps("rule", containersRule, "reason", "Invalid", "param", "prod/strict")},
		},
	}, {
		name:     "a Warn binding warns",
		policy:   podPolicy(),
		bindings: bindings{newBinding("w", "p", withActions(admissionregistrationv1.Warn))},
		deps:     withWorkloads,
		obj:      newWorkload("Deployment", "prod", "web", podTemplate("nginx:latest", nil)),
		want: []row{{"validations[0]", audit.Warn, "no latest images",
			props("binding", "w", "validationActions", "Warn", "operation", "CREATE", "rule", imageRule, "reason", "Invalid", audit.PropPodTemplate, "true")}},
	}, {
		name:     "each binding",
		policy:   podPolicy(),
		bindings: bindings{newBinding("b", "p"), newBinding("c", "p", prodOnly)},
		deps:     withWorkloads,
		obj:      newWorkload("Deployment", "prod", "web", podTemplate("nginx:latest", nil)),
		want: []row{latestFail, {"validations[0]", audit.Fail, "no latest images",
			props("binding", "c", "validationActions", "Deny", "operation", "CREATE", "rule", imageRule, "reason", "Invalid", audit.PropPodTemplate, "true")}},
	}, {
		name:    "an unbound policy audits templates",
		policy:  podPolicy(),
		unbound: true,
		deps:    withWorkloads,
		obj:     newWorkload("Deployment", "prod", "web", podTemplate("nginx:latest", nil)),
		want: []row{{"validations[0]", audit.Warn, "no latest images",
			props("validationActions", "Audit", "operation", "CREATE", "rule", imageRule, "reason", "Invalid", audit.PropPodTemplate, "true")}},
	}})
}

// TestPodTemplateAndWorkloadRules checks a policy that matches both Pods and Deployments: the Deployment
// gets the policy's results on itself and on its template, told apart by the podTemplate property.
func TestPodTemplateAndWorkloadRules(t *testing.T) {
	const rule0 = "object.kind != 'Deployment' || object.spec.replicas < 3"
	policy := podPolicy(withRules(rule("", "v1", "pods"), rule("apps", "v1", "deployments")))
	policy.Spec.Validations = []admissionregistrationv1.Validation{
		{Expression: rule0, Message: "too many replicas"},
		{Expression: "object.kind != 'Pod' || " + imageRule, Message: "no latest images"},
	}
	runCases(t, []evalCase{{
		name:   "both fail",
		policy: policy,
		deps:   withWorkloads,
		obj:    newWorkload("Deployment", "prod", "web", podTemplate("nginx:latest", nil), withField(int64(5), "spec", "replicas")),
		want: []row{
			{"validations[0]", audit.Fail, "too many replicas", denyProps("rule", rule0, "reason", "Invalid")},
			{"validations[1]", audit.Fail, "no latest images", templateProps("rule", "object.kind != 'Pod' || "+imageRule, "reason", "Invalid")},
		},
	}, {
		name:   "both pass",
		policy: policy,
		deps:   withWorkloads,
		obj:    newWorkload("Deployment", "prod", "web", podTemplate("nginx:1.27", nil), withField(int64(1), "spec", "replicas")),
		want: []row{
			{"validations", audit.Pass, "object satisfies the 2 validations evaluated", denyProps()},
			{"validations", audit.Pass, "object satisfies the 2 validations evaluated", templateProps()},
		},
	}})

	p := CompilePolicy(policy, Options{}).Bind(bindings{newBinding("b", "p")}, Deps{Namespaces: testNamespaces(), Resolver: workloadResolver(nil)})
	if got := p.Resources(); countOf(got, deploymentsGVR) != 1 {
		t.Errorf("Resources() = %v, want deployments once", got)
	}
	// The same rule, verdict and message on the workload and on its template: distinct result IDs.
	same := podPolicy(withRules(rule("", "v1", "pods"), rule("apps", "v1", "deployments")))
	same.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "false", Message: "never"}}
	res := CompilePolicy(same, Options{}).Bind(bindings{newBinding("b", "p")}, Deps{Namespaces: testNamespaces(), Resolver: workloadResolver(nil)}).
		Evaluate(defaultTestContext, deploymentsGVR, newWorkload("Deployment", "prod", "web", podTemplate("nginx:1.27", nil)))
	if len(res) != 2 || res[0].ID() == res[1].ID() || res[0].Properties[audit.PropPodTemplate] != "" || res[1].Properties[audit.PropPodTemplate] != "true" {
		t.Errorf("want a result on the workload and one on its template, with distinct IDs; got %+v", res)
	}
}

func countOf(s []schema.GroupVersionResource, v schema.GroupVersionResource) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func TestPodTemplateResources(t *testing.T) {
	podsAndWorkloads := []schema.GroupVersionResource{podsGVR, deploymentsGVR, statefulSetsGVR, daemonSetsGVR, replicaSetsGVR, jobsGVR, cronJobsGVR}
	cases := []struct {
		name     string
		policy   *admissionregistrationv1.ValidatingAdmissionPolicy
		bindings bindings
		resolver *StaticResolver
		want     []schema.GroupVersionResource
		// workload is a Deployment whose template breaks every policy here: it gets template results
		// exactly when the policy expands templates.
		expands bool
	}{{
		name:    "a Pod policy reads Pods and the served workloads, in discovery order",
		policy:  podPolicy(),
		want:    podsAndWorkloads,
		expands: true,
	}, {
		name:   "without the annotation only Pods",
		policy: newPolicy("p", withRules(rule("", "v1", "pods")), withValidation(imageRule)),
		want:   []schema.GroupVersionResource{podsGVR},
	}, {
		name: "the annotation set to false",
		policy: podPolicy(func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Annotations[audit.AnnotationExpandPodTemplates] = "false"
		}),
		want: []schema.GroupVersionResource{podsGVR},
	}, {
		name:   "a policy that does not match Pods reads no workload for templates",
		policy: podPolicy(withRules(rule("", "v1", "configmaps"))),
		want:   []schema.GroupVersionResource{configMapsGVR},
	}, {
		name:   "a policy on Deployments is not expanded",
		policy: podPolicy(withRules(rule("apps", "v1", "deployments"))),
		want:   []schema.GroupVersionResource{deploymentsGVR},
	}, {
		name:   "Pod subresources only",
		policy: podPolicy(withRules(rule("", "v1", "pods/ephemeralcontainers"))),
		want:   nil,
	}, {
		name:   "a binding that excludes Pods",
		policy: podPolicy(withRules(rule("", "v1", "pods"), rule("", "v1", "configmaps"))),
		bindings: bindings{newBinding("b", "p", withMatchResources(func(m *admissionregistrationv1.MatchResources) {
			m.ResourceRules = []admissionregistrationv1.NamedRuleWithOperations{rule("", "v1", "configmaps")}
		}))},
		want: []schema.GroupVersionResource{configMapsGVR},
	}, {
		name:     "only served workload resources",
		policy:   podPolicy(),
		resolver: workloadResolver(func(b *metav1.APIResourceList) { b.APIResources = b.APIResources[:1] }),
		want:     []schema.GroupVersionResource{podsGVR, deploymentsGVR, statefulSetsGVR, daemonSetsGVR, replicaSetsGVR, jobsGVR},
		expands:  true,
	}, {
		name:     "only workload resources that can be listed and watched",
		policy:   podPolicy(),
		resolver: workloadResolver(func(b *metav1.APIResourceList) { b.APIResources[0].Verbs = metav1.Verbs{"get", "list"} }),
		want:     []schema.GroupVersionResource{podsGVR, deploymentsGVR, statefulSetsGVR, daemonSetsGVR, replicaSetsGVR, cronJobsGVR},
		expands:  true,
	}, {
		name:     "a cluster without Pods",
		policy:   podPolicy(),
		resolver: mustResolver(t, []*metav1.APIResourceList{{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: listVerbs}}}}),
		want:     nil,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resolver := c.resolver
			if resolver == nil {
				resolver = workloadResolver(nil)
			}
			bs := c.bindings
			if bs == nil {
				bs = bindings{newBinding("b", "p")}
			}
			p := CompilePolicy(c.policy, Options{}).Bind(bs, Deps{Namespaces: testNamespaces(), Resolver: resolver})
			if got := p.Resources(); !slices.Equal(got, c.want) {
				t.Errorf("Resources() = %v, want %v", got, c.want)
			}
			res := p.Evaluate(defaultTestContext, deploymentsGVR, newWorkload("Deployment", "prod", "web", podTemplate("nginx:latest", nil)))
			templated := slices.ContainsFunc(res, func(r audit.Result) bool { return r.Properties[audit.PropPodTemplate] == "true" })
			if templated != c.expands {
				t.Errorf("template results on a Deployment: %v, want %v (results %+v)", templated, c.expands, res)
			}
		})
	}
}

func mustResolver(t *testing.T, lists []*metav1.APIResourceList) *StaticResolver {
	t.Helper()
	r, err := NewStaticResolver(lists)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPodsStillEvaluated checks that a policy expanding templates evaluates Pods as before.
func TestPodsStillEvaluated(t *testing.T) {
	deps := Deps{Namespaces: testNamespaces(), Resolver: workloadResolver(nil)}
	pod := newObject("v1", "Pod", "prod", "web-1", withField([]any{map[string]any{"name": "c", "image": "nginx:latest"}}, "spec", "containers"))
	expanded := CompilePolicy(podPolicy(), Options{}).Bind(bindings{newBinding("b", "p")}, deps)
	plain := newPolicy("p", withRules(rule("", "v1", "pods")), withValidation(imageRule, message("no latest images")))
	got := expanded.Evaluate(defaultTestContext, podsGVR, pod)
	want := CompilePolicy(plain, Options{}).Bind(bindings{newBinding("b", "p")}, deps).Evaluate(defaultTestContext, podsGVR, pod)
	if len(got) != 1 || !reflect.DeepEqual(got, want) {
		t.Errorf("Pod results = %+v, want %+v", got, want)
	}
}

// TestExpandingPodTemplates checks the method Bind expands an annotated policy with, called on a policy bound
// without the annotation: it gives
// the annotated policy's results, leaves the policy it is called on alone, and is idempotent.
func TestExpandingPodTemplates(t *testing.T) {
	deps := Deps{Namespaces: testNamespaces(), Resolver: workloadResolver(nil)}
	plain := newPolicy("p", withRules(rule("", "v1", "pods")), withValidation(imageRule, message("no latest images")))
	p := CompilePolicy(plain, Options{}).Bind(bindings{newBinding("b", "p")}, deps)
	q := p.expandingPodTemplates()
	annotated := CompilePolicy(podPolicy(), Options{}).Bind(bindings{newBinding("b", "p")}, deps)

	workload := newWorkload("StatefulSet", "prod", "db", podTemplate("postgres:latest", nil))
	if got := p.Evaluate(defaultTestContext, statefulSetsGVR, workload); len(got) != 0 {
		t.Errorf("the policy the method was called on evaluates templates: %+v", got)
	}
	if got := p.Resources(); !slices.Equal(got, []schema.GroupVersionResource{podsGVR}) {
		t.Errorf("the policy the method was called on has Resources() = %v", got)
	}
	got := q.Evaluate(defaultTestContext, statefulSetsGVR, workload)
	if want := annotated.Evaluate(defaultTestContext, statefulSetsGVR, workload); len(got) != 1 || !reflect.DeepEqual(got, want) {
		t.Errorf("expanded policy results = %+v, want the annotated policy's %+v", got, want)
	}
	if got[0].Resource != audit.RefOf(workload) {
		t.Errorf("result resource = %+v, want the workload %+v", got[0].Resource, audit.RefOf(workload))
	}
	if !slices.Equal(q.Resources(), annotated.Resources()) {
		t.Errorf("Resources() = %v, want the annotated policy's %v", q.Resources(), annotated.Resources())
	}
	if q.expandingPodTemplates() != q || annotated.expandingPodTemplates() != annotated {
		t.Errorf("expandingPodTemplates of an expanded policy returned another policy")
	}
	// Resources returns a copy: changing it changes nothing.
	r := q.Resources()
	r[0] = schema.GroupVersionResource{}
	if q.Resources()[0] != podsGVR {
		t.Errorf("Resources() shares its slice")
	}
}

// TestPodTemplateCacheKey checks that turning the expansion on or off compiles the policy again.
func TestPodTemplateCacheKey(t *testing.T) {
	on := podPolicy()
	off := on.DeepCopy()
	delete(off.Annotations, audit.AnnotationExpandPodTemplates)
	if CacheKey(on) == CacheKey(off) {
		t.Errorf("CacheKey does not change with %s: %q", audit.AnnotationExpandPodTemplates, CacheKey(on))
	}
}

// TestPodTemplateWithoutKind checks a workload read without apiVersion and kind (as some list decoders leave
// it): the result names the workload's kind, from the resource it was read at.
func TestPodTemplateWithoutKind(t *testing.T) {
	deps := Deps{Namespaces: testNamespaces(), Resolver: workloadResolver(nil)}
	p := CompilePolicy(podPolicy(), Options{}).Bind(bindings{newBinding("b", "p")}, deps)
	workload := newWorkload("DaemonSet", "prod", "agent", podTemplate("agent:latest", nil))
	delete(workload.Object, "apiVersion")
	delete(workload.Object, "kind")
	got := p.Evaluate(defaultTestContext, daemonSetsGVR, workload)
	want := audit.ObjectRef{APIVersion: "apps/v1", Kind: "DaemonSet", Namespace: "prod", Name: "agent", UID: "uid-agent"}
	if len(got) != 1 || got[0].Resource != want || got[0].Verdict != audit.Fail {
		t.Errorf("got %+v, want one fail on %+v", got, want)
	}
}

// TestConcurrentPodTemplates evaluates templates from several goroutines, as a scan does (run with -race).
func TestConcurrentPodTemplates(t *testing.T) {
	deps := testDeps(t)
	deps.Resolver = workloadResolver(nil)
	p := CompilePolicy(podPolicy(withParamKind(limitsGVK), withValidation("size(object.spec.containers) <= params.spec.maxReplicas")),

		Options{}).Bind(
		bindings{newBinding("b", "p", paramRef(paramRefSelector(map[string]string{"tier": "limits"}), notFound(admissionregistrationv1.DenyAction)))},
		deps)

	workload := newWorkload("CronJob", "prod", "nightly", podTemplate("nginx:latest", map[string]any{"app": "web"}))
	want := p.Evaluate(defaultTestContext, cronJobsGVR, workload)
	if len(want) != 2 {
		t.Fatalf("got %+v, want a fail per param", want)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if got := p.Evaluate(defaultTestContext, cronJobsGVR, workload); !reflect.DeepEqual(got, want) {
					t.Errorf("concurrent Evaluate = %+v, want %+v", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
