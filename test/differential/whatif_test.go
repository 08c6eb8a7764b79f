package differential

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/cli"
	"github.com/celaudit/celaudit/internal/whatif"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// prediction is one result of `kubectl celaudit whatif -o json`, as the reports list it.
type prediction struct {
	namespace, name, kind, policy string
	verdict                       string
	message                       string
	props                         map[string]string
}

func (p prediction) object() string { return p.namespace + "/" + p.name }

// TestWhatifPredictsAPIServer runs `kubectl celaudit whatif` before each change of a rollout and checks,
// once the change is applied, that the API server gives exactly the predicted answers: a server-side dry-run
// create of each stored object is rejected with the predicted field errors or denial, a no-op update is
// rejected exactly when a failure is predicted onUpdate: rejected, and an update that touches a field whose
// failure is predicted ratcheted is rejected. The whatif values are checked against lists written by hand.
//
// The cluster is the front-end fixture under other names (wi- for fe-, whatif.example.com for
// frontends.example.com), stored without the rules, as a rollout stores objects before tightening. It has a
// control plane of its own: once no binding uses a built-in param kind, kube-apiserver never sees changes to
// params of that kind again (kubernetes/kubernetes#130887), and the other tests of this package remove
// policies with ConfigMap params; step 4 needs the API server to see a param change.
func TestWhatifPredictsAPIServer(t *testing.T) {
	ctx := t.Context()
	env := envtestutil.StartForTest(t)
	data, err := os.ReadFile("testdata/frontends/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	renamed := strings.NewReplacer("fe-", "wi-", "frontends.example.com", "whatif.example.com").Replace(string(data))
	objs, err := envtestutil.DecodeYAML([]byte(renamed))
	if err != nil {
		t.Fatal(err)
	}
	// The fixture's MutatingAdmissionPolicies are left out: this rollout tightens validation, and a policy
	// that changes objects on their next write would turn the no-op updates it checks into real ones.
	objs = slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool {
		return strings.HasPrefix(o.GetKind(), "MutatingAdmissionPolicy")
	})
	crd, policies, stored := splitFrontendFixture(objs)
	var limits *unstructured.Unstructured
	for _, o := range stored {
		if o.GetKind() == "ConfigMap" && o.GetNamespace() == "wi-a" && o.GetName() == "limits" {
			limits = o
		}
	}
	if err := envtestutil.Apply(ctx, env.Client, laxWidgetCRD(t, crd)); err != nil {
		t.Fatal(err)
	}
	if err := envtestutil.Apply(ctx, env.Client, stored...); err != nil {
		t.Fatal(err)
	}
	kubeconfig := env.KubeconfigFile(t)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	w := &whatifRollout{t: t, env: env, dyn: dyn, kubeconfig: kubeconfig, stored: stored}

	// 1. The CRD's rules over objects stored without them: every failure is new.
	w.step("tighten the CRD", []*unstructured.Unstructured{crd}, cli.ExitViolations, []string{
		"wi-a/even pass unchanged",
		"wi-a/odd fail new",
		"wi-b/long fail new",
		"wi-b/long skip new", // the rules are not run over an object too long for its schema
		"wi-c/huge fail new",
	}, w.answers("Widget", "wi-a", "odd", "create", `replicas must be even`), w.checkCRD)

	// 2. A revision that drops the replicas rule and the owner's maxLength: their failures are fixed.
	revised := laxWidgetCRD(t, crd)
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	rules, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "x-kubernetes-validations")
	revisedVersions, _, _ := unstructured.NestedSlice(revised.Object, "spec", "versions")
	if err := unstructured.SetNestedSlice(revisedVersions[0].(map[string]any), rules[1:], "schema", "openAPIV3Schema", "properties", "spec", "x-kubernetes-validations"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(revised.Object, revisedVersions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	w.step("revise the CRD", []*unstructured.Unstructured{revised}, cli.ExitOK, []string{
		"wi-a/even pass unchanged",
		"wi-a/odd pass fixed", "wi-a/odd fail fixed", // replicas must be even
		"wi-b/long pass fixed", "wi-b/long fail fixed", // too long
		"wi-c/huge fail unchanged", // the size rule, now the first rule
	}, w.answers("Widget", "wi-a", "odd", "create", ""), w.checkCRD)

	// 3. The policies and their bindings, none of which exist yet.
	// 3. The policies and their bindings, none of which exist yet. wi-size: wi-size-a (Deny) with the param
	// wi-a/limits (max 5) on every ConfigMap of wi-a; wi-size-labelled (Warn, Audit) on the labelled
	// ConfigMaps of wi-a and wi-b with the labelled param of their namespace (none in wi-a: a configuration
	// error, which the API server denies whatever the actions). wi-team (Warn) on everything of the three
	// namespaces: wi-c names no team, and the token of wi-a is long. wi-sized (Warn) on the ConfigMaps with a
	// size: its matchCondition excludes the two limits, which get no result of it.
	w.step("add the policies", policies, cli.ExitViolations, []string{
		"wi-a/limits pass unchanged", "wi-a/limits pass unchanged",
		"wi-a/small pass unchanged", "wi-a/small error new", "wi-a/small pass unchanged", "wi-a/small pass unchanged",
		"wi-a/big fail new", "wi-a/big pass unchanged", "wi-a/big pass unchanged",
		"wi-a/token warn new",
		"wi-a/even pass unchanged", "wi-a/odd pass unchanged",
		"wi-b/limits pass unchanged",
		"wi-b/big pass unchanged", "wi-b/big pass unchanged", "wi-b/big pass unchanged",
		"wi-b/long pass unchanged",
		"wi-c/odd warn new", "wi-c/odd warn new",
		"wi-c/huge warn new",
	}, w.answers("ConfigMap", "wi-a", "big", "create", "size 9 exceeds 5"), w.checkVAP)

	// 4. A lower limit in wi-a: the param is read from the proposal instead of the cluster. Only wi-size
	// reads ConfigMaps as params.
	lower := limits.DeepCopy()
	if err := unstructured.SetNestedField(lower.Object, "1", "data", "max"); err != nil {
		t.Fatal(err)
	}
	w.step("lower a param", []*unstructured.Unstructured{lower}, cli.ExitViolations, []string{
		"wi-a/limits pass unchanged",
		"wi-a/small fail new", // size 2 exceeds 1
		"wi-a/small error unchanged",
		"wi-a/big fail new",   // size 9 exceeds 1
		"wi-a/big fail fixed", // size 9 exceeds 5, today
		"wi-b/big pass unchanged",
	}, w.answers("ConfigMap", "wi-a", "big", "create", "size 9 exceeds 1"), w.checkVAP)

	// 5. wi-size narrowed to creates: the same failures, which updates no longer meet.
	var createOnly *unstructured.Unstructured
	for _, p := range policies {
		if p.GetKind() == "ValidatingAdmissionPolicy" && p.GetName() == "wi-size" {
			createOnly = p.DeepCopy()
		}
	}
	rules, _, _ = unstructured.NestedSlice(createOnly.Object, "spec", "matchConstraints", "resourceRules")
	rules[0].(map[string]any)["operations"] = []any{"CREATE"}
	if err := unstructured.SetNestedSlice(createOnly.Object, rules, "spec", "matchConstraints", "resourceRules"); err != nil {
		t.Fatal(err)
	}
	w.step("narrow a policy to creates", []*unstructured.Unstructured{createOnly}, cli.ExitOK, []string{
		"wi-a/limits pass unchanged",
		"wi-a/small fail unchanged",
		"wi-a/small error unchanged",
		"wi-a/big fail unchanged",
		"wi-b/big pass unchanged",
	}, w.answers("ConfigMap", "wi-a", "big", "update", ""), w.checkVAP)

	// 6. A stricter version served beside v1 (conversion None, v1 still the storage version): the stored
	// Widgets read in v2 must satisfy the original rules, an owner of at most 8 bytes and at most 3 replicas.
	// v1 is unchanged; every finding in v2 is new, and the API server rejects a write in v2 exactly as
	// predicted.
	v2 := versions[0].(map[string]any)
	v2 = runtime.DeepCopyJSON(v2)
	v2["name"], v2["storage"] = "v2", false
	if err := unstructured.SetNestedField(v2, int64(3), "schema", "openAPIV3Schema", "properties", "spec", "properties", "replicas", "maximum"); err != nil {
		t.Fatal(err)
	}
	twoVersions := revised.DeepCopy()
	if err := unstructured.SetNestedSlice(twoVersions.Object, append(slices.Clone(revisedVersions), v2), "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	w.step("serve a stricter version", []*unstructured.Unstructured{twoVersions}, cli.ExitViolations, []string{
		"wi-a/even pass unchanged", "wi-a/odd pass unchanged", "wi-b/long pass unchanged", "wi-c/huge fail unchanged", // v1
		"wi-a/even pass unchanged", // v2
		"wi-a/odd fail new",        // replicas must be even
		"wi-b/long fail new",       // too long
		"wi-b/long skip new",       // the rules are not run over an object too long for its schema
		"wi-c/huge fail new",       // at most 3 replicas
		"wi-c/huge fail new",       // size xxl
	}, w.answersIn("v2", "Widget", "wi-a", "odd", "create", "replicas must be even"), w.checkCRD)

	if w.ratcheted == 0 || w.rejected == 0 || w.allowed == 0 {
		t.Errorf("the rollout checked %d ratcheted, %d rejected and %d allowed updates: want each", w.ratcheted, w.rejected, w.allowed)
	}
}

// whatifRollout applies a proposal after predicting it, and compares.
type whatifRollout struct {
	t          *testing.T
	env        *envtestutil.Env
	dyn        dynamic.Interface
	kubeconfig string
	stored     []*unstructured.Unstructured
	// Updates checked, by the onUpdate predicted.
	ratcheted, rejected, allowed int
}

// step runs whatif on proposal, checks the whatif values (plus fixed failures, one line each, as
// "<namespace>/<name> <verdict> <whatif>") against want, applies the proposal, waits until inEffect says the
// API server enforces it, and runs check until the API server's answers equal the predictions (the API
// server takes a moment to enforce new rules and params, object by object).
func (w *whatifRollout) step(name string, proposal []*unstructured.Unstructured, code cli.ExitCode, want []string,
	inEffect func() error, check func(predicted []prediction) error) {
	t := w.t
	t.Run(name, func(t *testing.T) {
		predicted, fixed := w.predict(t, proposal, code)
		var got []string
		for _, p := range predicted {
			got = append(got, fmt.Sprintf("%s %s %s", p.object(), p.verdict, p.props[whatif.PropWhatif]))
		}
		got = append(got, fixed...)
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("whatif values:\n got: %q\nwant: %q", got, want)
		}
		if err := envtestutil.Apply(t.Context(), w.env.Client, proposal...); err != nil {
			t.Fatal(err)
		}
		// Compared only once the API server enforces the change, seen on an object of the fixture's (before,
		// a prediction of the change could pass on the answers of the previous state).
		envtestutil.Eventually(t, 30*time.Second, inEffect)
		envtestutil.Eventually(t, 30*time.Second, func() error { return check(predicted) })
	})
}

// predict runs whatif on proposal and returns every result it lists in its reports (--results all), and
// the fixed failures of its table, as "<namespace>/<name> <verdict> fixed".
func (w *whatifRollout) predict(t *testing.T, proposal []*unstructured.Unstructured, code cli.ExitCode) ([]prediction, []string) {
	t.Helper()
	var docs []string
	for _, o := range proposal {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	path := filepath.Join(t.TempDir(), "proposal.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		var out, errOut bytes.Buffer
		streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
		if got := cli.ExitCode(cli.Run(streams, append([]string{"whatif", "-f", path, "--kubeconfig", w.kubeconfig}, args...))); got != code {
			t.Fatalf("whatif %v: exit code %d, want %d\n%s%s", args, got, code, out.String(), errOut.String())
		}
		return out.String()
	}

	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal([]byte(run("-o", "json", "--results", "all")), &list); err != nil {
		t.Fatal(err)
	}
	var out []prediction
	for _, item := range list.Items {
		r := v1alpha2.PolicyReport{}
		if err := json.Unmarshal(item, &r); err != nil {
			t.Fatal(err)
		}
		for _, res := range r.Results {
			ref := res.Resources[0]
			out = append(out, prediction{namespace: ref.Namespace, name: ref.Name, kind: ref.Kind, policy: res.Policy,
				verdict: string(res.Result), message: res.Message, props: res.Properties})
		}
	}
	var fixed []string
	for _, line := range strings.Split(run(), "\n") {
		// WHATIF RESULT ON-UPDATE POLICY NAMESPACE OBJECT MESSAGE
		if f := strings.Fields(line); len(f) > 6 && f[0] == whatif.WhatifFixed {
			fixed = append(fixed, fmt.Sprintf("%s/%s %s fixed", f[4], f[5][strings.Index(f[5], "/")+1:], f[1]))
		}
	}
	return out, fixed
}

// answers returns a check that the API server answers a dry-run request (a create of the stored object, or
// its no-op update) for the stored object of kind, namespace and name with an error containing text, or
// accepts it when text is "".
func (w *whatifRollout) answers(kind, namespace, name, request, text string) func() error {
	return w.answersIn("", kind, namespace, name, request, text)
}

// answersIn is answers for the request made in version ("" for the version the fixture stores).
func (w *whatifRollout) answersIn(version, kind, namespace, name, request, text string) func() error {
	return func() error {
		ctx := context.Background()
		var obj *unstructured.Unstructured
		for _, o := range w.storedOf(kind) {
			if o.GetNamespace() == namespace && o.GetName() == name {
				obj = o
			}
		}
		res := w.resourceIn(obj, version)
		current, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		dryRun := []string{metav1.DryRunAll}
		if request == "update" {
			_, err = res.Update(ctx, current, metav1.UpdateOptions{DryRun: dryRun})
		} else {
			_, err = res.Create(ctx, asNew(current), metav1.CreateOptions{DryRun: dryRun})
		}
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		if text == "" && err == nil || text != "" && err != nil && strings.Contains(err.Error(), text) {
			return nil
		}
		if err == nil {
			return fmt.Errorf("%s of %s/%s/%s: want an answer with %q, got an acceptance", request, namespace, kind, name, text)
		}
		return fmt.Errorf("%s of %s/%s/%s: want an answer with %q: %w", request, namespace, kind, name, text, err)
	}
}

// storedOf returns the stored objects of kind.
func (w *whatifRollout) storedOf(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range w.stored {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func (w *whatifRollout) resource(obj *unstructured.Unstructured) dynamic.ResourceInterface {
	return w.resourceIn(obj, "")
}

// resourceIn is the resource of obj in version ("" for obj's own).
func (w *whatifRollout) resourceIn(obj *unstructured.Unstructured, version string) dynamic.ResourceInterface {
	gvk := obj.GroupVersionKind()
	plural := strings.ToLower(gvk.Kind) + "s"
	return w.dyn.Resource(schema.GroupVersionResource{Group: gvk.Group, Version: cmp.Or(version, gvk.Version), Resource: plural}).Namespace(obj.GetNamespace())
}

// checkCRD compares the predictions for each stored Widget, in each version predicted, with the API server's
// answers to requests in that version: a dry-run create of the stored object fails with exactly the predicted
// field errors; a no-op update is rejected exactly when a failure is predicted rejected; an update that
// touches the fields of the failures predicted ratcheted is rejected.
func (w *whatifRollout) checkCRD(predicted []prediction) error {
	versions := map[string]bool{}
	for _, p := range predicted {
		if p.kind == "Widget" {
			versions[p.props[audit.PropCRDVersion]] = true
		}
	}
	for _, version := range slices.Sorted(maps.Keys(versions)) {
		if err := w.checkCRDIn(version, predicted); err != nil {
			return fmt.Errorf("version %s: %w", version, err)
		}
	}
	return nil
}

// checkCRDIn is checkCRD for the predictions and requests of one version.
func (w *whatifRollout) checkCRDIn(version string, predicted []prediction) error {
	ctx := context.Background()
	for _, obj := range w.storedOf("Widget") {
		res := w.resourceIn(obj, version)
		current, err := res.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		var wantErrs []string
		var ratcheted []prediction
		rejectedOnUpdate := false
		for _, p := range predicted {
			if p.kind != "Widget" || p.object() != obj.GetNamespace()+"/"+obj.GetName() || p.props[audit.PropCRDVersion] != version {
				continue
			}
			// Field errors: failures, and the skip of rules not run because of them (it has a reason).
			if p.verdict == string(audit.Fail) || p.verdict == string(audit.Skip) && p.props[audit.PropReason] != "" {
				wantErrs = append(wantErrs, p.message)
			}
			switch p.props[whatif.PropOnUpdate] {
			case whatif.OnUpdateRatcheted:
				ratcheted = append(ratcheted, p)
			case whatif.OnUpdateRejected:
				rejectedOnUpdate = true
			}
		}
		gotErrs, err := invalidCauses(res.Create(ctx, asNew(current), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}))
		if err != nil {
			return fmt.Errorf("create %s: %w", obj.GetName(), err)
		}
		if missing, extra := difference(wantErrs, gotErrs); len(missing)+len(extra) > 0 {
			return fmt.Errorf("create %s: field errors predicted but not given %q, given but not predicted %q", obj.GetName(), missing, extra)
		}
		noop, err := invalidCauses(res.Update(ctx, current.DeepCopy(), metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}))
		if err != nil {
			return fmt.Errorf("no-op update of %s: %w", obj.GetName(), err)
		}
		if (len(noop) > 0) != rejectedOnUpdate {
			return fmt.Errorf("no-op update of %s: predicted rejected=%v, the API server answered %q", obj.GetName(), rejectedOnUpdate, noop)
		}
		for _, p := range ratcheted {
			touched := current.DeepCopy()
			touchLeaves(touched.Object, p.props[audit.PropFieldPath])
			errs, err := invalidCauses(res.Update(ctx, touched, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}))
			if err != nil {
				return fmt.Errorf("update of %s touching %s: %w", obj.GetName(), p.props[audit.PropFieldPath], err)
			}
			if len(errs) == 0 {
				return fmt.Errorf("update of %s touching %s: accepted, although %q is only ratcheted while the field is unchanged",
					obj.GetName(), p.props[audit.PropFieldPath], p.message)
			}
		}
		w.count(len(ratcheted), rejectedOnUpdate)
	}
	return nil
}

func (w *whatifRollout) count(ratcheted int, rejected bool) {
	w.ratcheted += ratcheted
	if rejected {
		w.rejected++
	}
}

// checkVAP compares the predictions for each stored ConfigMap and Secret with the API server's answers to a
// dry-run create (denied exactly when a denial is predicted, with a predicted denial's text) and to a no-op
// update (denied exactly when a failure is predicted onUpdate: rejected).
func (w *whatifRollout) checkVAP(predicted []prediction) error {
	ctx := context.Background()
	for _, obj := range append(w.storedOf("ConfigMap"), w.storedOf("Secret")...) {
		res := w.resource(obj)
		current, err := res.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		var denials []string
		rejectedOnUpdate, allowed := false, 0
		for _, p := range predicted {
			if p.kind != obj.GetKind() || p.object() != obj.GetNamespace()+"/"+obj.GetName() {
				continue
			}
			// The dispatcher denies a failure, and under failurePolicy Fail a binding's configuration error
			// whatever its actions, or any error of a Deny binding.
			deny := p.verdict == string(audit.Fail) || p.verdict == string(audit.Error) && p.props[audit.PropFailurePolicy] == "Fail" &&
				(strings.HasPrefix(p.message, "failed to configure binding: ") || strings.Contains(p.props[audit.PropValidationActions], "Deny"))
			if deny {
				denials = append(denials, fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", p.policy, p.props[audit.PropBinding], p.message))
			}
			rejectedOnUpdate = rejectedOnUpdate || p.props[whatif.PropOnUpdate] == whatif.OnUpdateRejected
			if p.props[whatif.PropOnUpdate] == whatif.OnUpdateAllowed {
				allowed++
			}
		}
		denial, err := denialOf(res.Create(ctx, asNew(current), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}))
		if err != nil {
			return fmt.Errorf("create %s/%s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if (denial != "") != (len(denials) > 0) || denial != "" && !slices.ContainsFunc(denials, func(d string) bool { return strings.HasSuffix(denial, d) }) {
			return fmt.Errorf("create %s/%s/%s: predicted denials %q, the API server answered %q", obj.GetNamespace(), obj.GetKind(), obj.GetName(), denials, denial)
		}
		noop, err := denialOf(res.Update(ctx, current.DeepCopy(), metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}))
		if err != nil {
			return fmt.Errorf("no-op update of %s/%s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if (noop != "") != rejectedOnUpdate {
			return fmt.Errorf("no-op update of %s/%s/%s: predicted rejected=%v, the API server answered %q", obj.GetNamespace(), obj.GetKind(), obj.GetName(), rejectedOnUpdate, noop)
		}
		w.count(0, rejectedOnUpdate)
		w.allowed += allowed
	}
	return nil
}

// asNew returns the stored object as a client would send it to create it again.
func asNew(stored *unstructured.Unstructured) *unstructured.Unstructured {
	out := stored.DeepCopy()
	for _, f := range []string{"resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"} {
		unstructured.RemoveNestedField(out.Object, "metadata", f)
	}
	return out
}

// invalidCauses returns the field errors of an Invalid answer ("field: message", as the audit prints them),
// none for an accepted request (a create of an existing name passed validation when it fails as
// AlreadyExists), and an error for any other answer.
func invalidCauses(_ runtime.Object, err error) ([]string, error) {
	if err == nil || apierrors.IsAlreadyExists(err) {
		return nil, nil
	}
	var status *apierrors.StatusError
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.ErrStatus.Details == nil {
		return nil, err
	}
	var out []string
	for _, c := range status.ErrStatus.Details.Causes {
		field := c.Field
		if field == "" {
			field = "<nil>"
		}
		if msg := field + ": " + c.Message; !slices.Contains(out, msg) {
			out = append(out, msg)
		}
	}
	return out, nil
}

// denialOf returns the text of a policy's denial, "" for an admitted request (or a create of an existing
// name, which fails as AlreadyExists after admission), and an error for any other answer.
func denialOf(_ runtime.Object, err error) (string, error) {
	if err == nil || apierrors.IsAlreadyExists(err) {
		return "", nil
	}
	var status *apierrors.StatusError
	if errors.As(err, &status) && strings.Contains(status.ErrStatus.Message, "ValidatingAdmissionPolicy '") {
		return status.ErrStatus.Message, nil
	}
	return "", err
}

// touchLeaves changes every string and integer under the field at path (dot-separated, from the object's
// root) so that each stays as valid or invalid as it was for the fixture's rules: strings get a suffix
// (sizes stay unknown, owners too long), integers grow by 2 (replicas keep their parity).
func touchLeaves(obj map[string]any, path string) {
	var touch func(v any) any
	touch = func(v any) any {
		switch v := v.(type) {
		case string:
			return v + "x"
		case int64:
			return v + 2
		case map[string]any:
			for k, e := range v {
				v[k] = touch(e)
			}
		}
		return v
	}
	fields := strings.Split(path, ".")
	parent, _, _ := unstructured.NestedFieldNoCopy(obj, fields[:len(fields)-1]...)
	if m, ok := parent.(map[string]any); ok {
		last := fields[len(fields)-1]
		m[last] = touch(m[last])
	}
}
