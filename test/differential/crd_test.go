package differential

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/internal/admit"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/crdrules"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// env is the control plane every test of this package shares; each fixture has its own CRD and namespace.
var env *envtestutil.Env

func TestMain(m *testing.M) {
	var err error
	env, err = envtestutil.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping control plane:", err)
	}
	os.Exit(code)
}

// Annotations of fixture objects.
const (
	// annotationExpect is the apiserver's expected answer: "accept" or "reject" for the object's own
	// version, or "v1alpha1=accept v1=reject" to create the object in each version named.
	annotationExpect = "celaudit.io/expect"
	// annotationCase names the subtest when the object's name alone is not unique in its version.
	annotationCase = "celaudit.io/case"
	// annotationSkips is the number of skip results the audit must give the object, e.g. for
	// transition rules, which a CREATE does not run.
	annotationSkips = "celaudit.io/skips"
)

// The fixtures must keep at least this much coverage, so that the comparison cannot silently shrink.
const (
	minObjects  = 60
	minRejected = 20
	minAccepted = 20
	minCRDs     = 5
)

// TestCRDValidationMatchesAPIServer creates every fixture object under its CRD and checks that the audit
// of the object, as the apiserver stores it, gives the apiserver's verdict with the apiserver's field
// errors. Subtests are named <fixture>/<version>/<object>.
func TestCRDValidationMatchesAPIServer(t *testing.T) {
	fixtures := loadFixtures(t, filepath.Join("testdata", "crd"))
	dyn := newDynamicClient(t)

	total := &tally[counts]{}
	t.Cleanup(func() {
		got := total.get()
		if subtestFiltered() {
			t.Logf("coverage not checked, subtests are filtered: %s", got)
			return
		}
		t.Logf("compared %s", got)
		if got.crds < minCRDs || got.objects < minObjects || got.rejected < minRejected || got.accepted < minAccepted {
			t.Errorf("comparison shrank: %s; want at least %d CRDs, %d objects, %d rejected, %d accepted",
				got, minCRDs, minObjects, minRejected, minAccepted)
		}
	})

	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			t.Parallel()
			runFixture(t, dyn, fx, total)
		})
	}
}

// TestFixtureCoverage checks, from the fixture files alone, that they keep the coverage the comparison
// promises; the comparison then checks that the apiserver agrees with each expectation.
func TestFixtureCoverage(t *testing.T) {
	fixtures := loadFixtures(t, filepath.Join("testdata", "crd"))
	objects, rejected, versions := 0, 0, 0
	for _, fx := range fixtures {
		for _, v := range fx.versions {
			if len(fx.cases[v]) > 0 {
				versions++
			}
			for _, c := range fx.cases[v] {
				objects++
				if c.reject {
					rejected++
				}
			}
		}
	}
	if len(fixtures) < minCRDs || objects < minObjects || rejected < minRejected || objects-rejected < minAccepted || versions <= len(fixtures) {
		t.Errorf("fixtures: %d CRDs, %d versions tried, %d objects, %d expected rejected, %d expected accepted; want at least %d CRDs, more versions than CRDs, %d objects, %d rejected, %d accepted",
			len(fixtures), versions, objects, rejected, objects-rejected, minCRDs, minObjects, minRejected, minAccepted)
	}
}

// runFixture installs the fixture's CRD, compiles the audit policy from the CRD as the apiserver
// returns it (defaulted), and compares every object, version by version.
func runFixture(t *testing.T, dyn dynamic.Interface, fx *fixture, total *tally[counts]) {
	ctx := t.Context()
	crd := createCRD(t, fx.crd)
	policy := crdrules.Compile(crd, crdrules.Options{})
	total.add(func(c *counts) { c.crds++ })

	namespace := ""
	if crd.Spec.Scope == apiextensionsv1.NamespaceScoped {
		namespace = "diff-" + fx.name
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
		if err := env.Client.Create(ctx, ns); err != nil {
			t.Fatalf("creating namespace %s: %v", namespace, err)
		}
	}
	structurals := structuralSchemas(t, crd)

	for _, version := range fx.versions {
		cases := fx.cases[version]
		if len(cases) == 0 {
			continue
		}
		t.Run(version, func(t *testing.T) {
			gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural}
			if !containsGVR(policy.Resources(), gvr) {
				t.Fatalf("policy resources %v do not include %v", policy.Resources(), gvr)
			}
			var res dynamic.ResourceInterface = dyn.Resource(gvr)
			if namespace != "" {
				res = dyn.Resource(gvr).Namespace(namespace)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					obj := c.obj.DeepCopy()
					obj.SetNamespace(namespace)
					rejected := compareObject(t, res, policy, crd, gvr, structurals[version], obj, c)
					total.add(func(c *counts) {
						c.objects++
						if rejected {
							c.rejected++
						} else {
							c.accepted++
						}
					})
				})
			}
		})
	}
}

// compareObject asks the apiserver and the audit about obj, reports every disagreement and returns
// whether the apiserver rejected the object.
func compareObject(t *testing.T, res dynamic.ResourceInterface, policy *crdrules.Policy, crd *apiextensionsv1.CustomResourceDefinition,
	gvr schema.GroupVersionResource, structural *structuralschema.Structural, obj *unstructured.Unstructured, c objectCase) bool {
	t.Helper()
	ctx := t.Context()

	// The apiserver's answer: a server-side dry-run create runs admission, defaulting and validation
	// without storing anything.
	rejection, err := dryRunCreate(ctx, res, obj)
	if err != nil {
		t.Fatalf("dry-run create: %v", err)
	}
	rejected := rejection != nil
	t.Logf("the apiserver %s", answer(rejection))
	if rejected != c.reject {
		t.Errorf("fixture expects the apiserver to %s the object, it %s", verb(c.reject), answer(rejection))
	}

	// The object the audit sees: what the apiserver stores and returns for an accepted object; for a
	// rejected one, which cannot be stored, the fixture object as the apiserver validated it.
	var audited *unstructured.Unstructured
	if rejected {
		audited = asValidated(obj, structural)
	} else {
		audited = createAndReadBack(t, res, obj)
	}

	results := policy.Evaluate(ctx, gvr, audited)
	findings := policy.Findings(ctx, gvr.Version, audited)
	if len(results) == 0 {
		t.Fatalf("the audit returned no result for %v", gvr)
	}
	auditRejects := false
	for _, r := range results {
		if r.Properties[audit.PropCRDVersion] != gvr.Version {
			t.Errorf("result %q has %s %q, want %q", r.Message, audit.PropCRDVersion, r.Properties[audit.PropCRDVersion], gvr.Version)
		}
		if r.Verdict == audit.Fail || r.Verdict == audit.Error {
			auditRejects = true
		}
	}
	if auditRejects != rejected {
		t.Errorf("verdicts differ: the apiserver %s, the audit %s\naudit results:\n%s",
			answer(rejection), map[bool]string{true: "fails the object", false: "passes the object"}[auditRejects], dumpResults(results))
	}
	if c.skips >= 0 {
		if n := countVerdict(results, audit.Skip); n != c.skips {
			t.Errorf("the audit gave %d skip results, the fixture expects %d\naudit results:\n%s", n, c.skips, dumpResults(results))
		}
	}

	ours := fieldErrorMessages(findings)
	if !rejected {
		if len(ours) > 0 {
			t.Errorf("the apiserver accepts the object, the audit reports field errors:\n  %s", strings.Join(ours, "\n  "))
		}
		return false
	}

	text := rejection.ErrStatus.Message
	theirs, causes := rejectionFieldErrors(t, rejection, crd, obj.GetName())
	for _, r := range results {
		if r.Verdict != audit.Fail && r.Verdict != audit.Error {
			continue
		}
		if !strings.Contains(text, r.Message) {
			t.Errorf("audit %s message is not in the apiserver's rejection:\n  audit:     %s\n  apiserver: %s", r.Verdict, r.Message, text)
			continue
		}
		// The result's properties name the field and reason of the apiserver's error.
		if cause, ok := causes[r.Message]; ok {
			wantPath := cause.Field
			if wantPath == "<nil>" {
				wantPath = ""
			}
			if got := r.Properties[audit.PropFieldPath]; got != wantPath {
				t.Errorf("result %q: %s %q, the apiserver's field is %q", r.Message, audit.PropFieldPath, got, wantPath)
			}
			if got := r.Properties[audit.PropReason]; got != string(cause.Type) {
				t.Errorf("result %q: %s %q, the apiserver's reason is %q", r.Message, audit.PropReason, got, cause.Type)
			}
		}
	}
	if missing, extra := difference(theirs, ours); len(missing)+len(extra) > 0 {
		t.Errorf("field errors differ\n  only the apiserver:\n    %s\n  only the audit:\n    %s\n  apiserver: %s",
			strings.Join(missing, "\n    "), strings.Join(extra, "\n    "), text)
	}
	return true
}

// dryRunCreate returns the apiserver's rejection of obj (nil when it accepts) or an error for any other
// answer. A fresh CRD is served a moment after it is established: until then the resource is not found,
// and the request is retried. The CRD is never updated, so the first schema served is the final one.
func dryRunCreate(ctx context.Context, res dynamic.ResourceInterface, obj *unstructured.Unstructured) (*apierrors.StatusError, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := res.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return nil, nil
		}
		var status *apierrors.StatusError
		if apierrors.IsInvalid(err) && errors.As(err, &status) {
			return status, nil
		}
		if !apierrors.IsNotFound(err) && !apierrors.IsMethodNotSupported(err) || time.Now().After(deadline) {
			return nil, fmt.Errorf("the apiserver neither accepted nor rejected the object as invalid: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createAndReadBack stores obj, reads it back in the same version and deletes it, so that the audit sees
// exactly what a scan would list (metadata, defaults, pruning, integer types) and the name is free for
// the next version.
func createAndReadBack(t *testing.T, res dynamic.ResourceInterface, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	ctx := t.Context()
	if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the dry run was accepted but the create failed: %v", err)
	}
	stored, err := res.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading back the created object: %v", err)
	}
	if err := res.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the created object: %v", err)
	}
	return stored
}

// asValidated returns obj as the apiserver validates a CREATE of it: decoded with unknown fields pruned,
// nulls of non-nullable fields without default dropped, defaults applied, and the system metadata set.
// The order is the apiserver's: pruning when decoding, then defaulting.
func asValidated(obj *unstructured.Unstructured, s *structuralschema.Structural) *unstructured.Unstructured {
	out := obj.DeepCopy()
	structuralpruning.Prune(out.Object, s, true)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(out.Object, s)
	structuraldefaulting.Default(out.Object, s)
	h := fnv.New64a()
	h.Write([]byte(obj.GetAPIVersion() + "/" + obj.GetName()))
	out.SetUID(types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012x", h.Sum64()&0xffffffffffff)))
	out.SetCreationTimestamp(metav1.NewTime(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)))
	out.SetGeneration(1)
	return out
}

// rejectionFieldErrors returns the field errors of an Invalid rejection, each as field.Error.Error()
// prints it, without repeats, and the cause of each, after checking that the rejection's text is exactly
// `<Kind>.<group> "<name>" is invalid: <errors>` built from them.
func rejectionFieldErrors(t *testing.T, rejection *apierrors.StatusError, crd *apiextensionsv1.CustomResourceDefinition, name string) ([]string, map[string]metav1.StatusCause) {
	t.Helper()
	status := rejection.ErrStatus
	if status.Details == nil || len(status.Details.Causes) == 0 {
		t.Fatalf("rejection without field errors: %s", status.Message)
	}
	var errs []string
	causes := map[string]metav1.StatusCause{}
	for _, cause := range status.Details.Causes {
		msg := cause.Field + ": " + cause.Message
		if _, seen := causes[msg]; !seen {
			causes[msg] = cause
			errs = append(errs, msg)
		}
	}
	joined := errs[0]
	if len(errs) > 1 {
		joined = "[" + strings.Join(errs, ", ") + "]"
	}
	kind := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
	if want := fmt.Sprintf("%s %q is invalid: %s", kind.String(), name, joined); status.Message != want {
		t.Errorf("rejection text is not built from its field errors as expected:\n  got:  %s\n  want: %s", status.Message, want)
	}
	return errs, causes
}

// fieldErrorMessages returns the messages of the audit's findings that are apiserver field errors,
// without repeats, as the apiserver prints them once.
func fieldErrorMessages(findings []crdrules.Finding) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range findings {
		if f.FieldError && !seen[f.Message] {
			seen[f.Message] = true
			out = append(out, f.Message)
		}
	}
	return out
}

// difference returns the members of want missing from got and the members of got not in want, sorted.
func difference(want, got []string) (missing, extra []string) {
	inWant, inGot := map[string]bool{}, map[string]bool{}
	for _, s := range want {
		inWant[s] = true
	}
	for _, s := range got {
		inGot[s] = true
	}
	for s := range inWant {
		if !inGot[s] {
			missing = append(missing, s)
		}
	}
	for s := range inGot {
		if !inWant[s] {
			extra = append(extra, s)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return missing, extra
}

func countVerdict(results []audit.Result, v audit.Verdict) int {
	n := 0
	for _, r := range results {
		if r.Verdict == v {
			n++
		}
	}
	return n
}

func dumpResults(results []audit.Result) string {
	var b strings.Builder
	for _, r := range results {
		fmt.Fprintf(&b, "  %s %s: %s\n", r.Verdict, r.Rule, r.Message)
	}
	return b.String()
}

func verb(reject bool) string {
	if reject {
		return "reject"
	}
	return "accept"
}

func answer(rejection *apierrors.StatusError) string {
	if rejection == nil {
		return "accepts it"
	}
	return "rejects it: " + rejection.ErrStatus.Message
}

func containsGVR(list []schema.GroupVersionResource, gvr schema.GroupVersionResource) bool {
	for _, g := range list {
		if g == gvr {
			return true
		}
	}
	return false
}

// createCRD installs crd and returns it as the apiserver stores it, once established.
func createCRD(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	ctx := t.Context()
	if err := env.Client.Create(ctx, crd.DeepCopy()); err != nil {
		t.Fatalf("creating CRD %s: %v", crd.Name, err)
	}
	if err := envtestutil.WaitEstablished(ctx, env.Client, crd.Name); err != nil {
		t.Fatal(err)
	}
	got := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.Name}, got); err != nil {
		t.Fatalf("reading back CRD %s: %v", crd.Name, err)
	}
	return got
}

// structuralSchemas returns the structural schema of each version of crd, to prepare rejected objects as
// the apiserver does.
func structuralSchemas(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) map[string]*structuralschema.Structural {
	t.Helper()
	out := map[string]*structuralschema.Structural{}
	for _, v := range crd.Spec.Versions {
		val, err := apihelpers.GetSchemaForVersion(crd, v.Name)
		if err != nil || val == nil {
			t.Fatalf("schema of %s %s: %v", crd.Name, v.Name, err)
		}
		s, err := admit.Structural(val)
		if err != nil {
			t.Fatalf("structural schema of %s %s: %v", crd.Name, v.Name, err)
		}
		out[v.Name] = s
	}
	return out
}

func newDynamicClient(t *testing.T) dynamic.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	// Objects with unknown fields are accepted with a warning per field; the fixtures rely on it.
	cfg.WarningHandler = rest.NoWarnings{}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating dynamic client: %v", err)
	}
	return dyn
}

// subtestFiltered reports whether -run or -skip selects only some subtests, in which case the totals
// are partial.
func subtestFiltered() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil {
			v := f.Value.String()
			if name == "test.skip" && v != "" || strings.Contains(v, "/") {
				return true
			}
		}
	}
	return false
}

// counts is what the comparison covered.
type counts struct {
	crds, objects, rejected, accepted int
}

func (c counts) String() string {
	return fmt.Sprintf("%d CRDs, %d objects (%d rejected, %d accepted)", c.crds, c.objects, c.rejected, c.accepted)
}

// tally accumulates counts from fixtures running in parallel.
type tally[T any] struct {
	mu sync.Mutex
	c  T
}

func (tl *tally[T]) add(f func(*T)) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	f(&tl.c)
}

func (tl *tally[T]) get() T {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.c
}

// fixture is one file of testdata/crd: a CRD and the objects to try, by version.
type fixture struct {
	name     string
	crd      *apiextensionsv1.CustomResourceDefinition
	versions []string
	cases    map[string][]objectCase
}

// objectCase is one object to create in one version.
type objectCase struct {
	name   string
	reject bool
	skips  int // -1 when not checked
	obj    *unstructured.Unstructured
}

// loadFixtures reads every fixture file of dir, checking that each is well formed.
func loadFixtures(t *testing.T, dir string) []*fixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures in %s: %v", dir, err)
	}
	var out []*fixture
	for _, p := range paths {
		fx, err := loadFixture(p)
		if err != nil {
			t.Fatalf("fixture %s: %v", p, err)
		}
		out = append(out, fx)
	}
	return out
}

func loadFixture(path string) (*fixture, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	docs, err := splitYAML(data)
	if err != nil {
		return nil, err
	}
	if len(docs) < 2 {
		return nil, fmt.Errorf("want a CRD followed by objects, got %d documents", len(docs))
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(docs[0], crd); err != nil {
		return nil, fmt.Errorf("decoding the CRD: %w", err)
	}
	fx := &fixture{
		name:  strings.TrimSuffix(filepath.Base(path), ".yaml"),
		crd:   crd,
		cases: map[string][]objectCase{},
	}
	served := map[string]bool{}
	for _, v := range crd.Spec.Versions {
		fx.versions = append(fx.versions, v.Name)
		served[v.Name] = v.Served
	}
	seen := map[string]bool{}
	for i, doc := range docs[1:] {
		obj, err := decodeObject(doc)
		if err != nil {
			return nil, fmt.Errorf("object %d: %w", i+1, err)
		}
		gv, err := schema.ParseGroupVersion(obj.GetAPIVersion())
		if err != nil || gv.Group != crd.Spec.Group || obj.GetKind() != crd.Spec.Names.Kind {
			return nil, fmt.Errorf("object %d (%s): apiVersion %q kind %q is not a %s of %s", i+1, obj.GetName(), obj.GetAPIVersion(), obj.GetKind(), crd.Spec.Names.Kind, crd.Spec.Group)
		}
		expect, err := parseExpect(obj.GetAnnotations()[annotationExpect], gv.Version)
		if err != nil {
			return nil, fmt.Errorf("object %d (%s): %w", i+1, obj.GetName(), err)
		}
		skips := -1
		if s, ok := obj.GetAnnotations()[annotationSkips]; ok {
			if skips, err = strconv.Atoi(s); err != nil || skips < 0 {
				return nil, fmt.Errorf("object %d (%s): %s %q is not a count", i+1, obj.GetName(), annotationSkips, s)
			}
		}
		name := obj.GetName()
		if c := obj.GetAnnotations()[annotationCase]; c != "" {
			name = c
		}
		for _, e := range expect {
			if !served[e.version] {
				return nil, fmt.Errorf("object %d (%s): version %q is not served by the CRD", i+1, name, e.version)
			}
			key := e.version + "/" + name
			if seen[key] {
				return nil, fmt.Errorf("object %d: %s repeats a case name; name the case with %s", i+1, key, annotationCase)
			}
			seen[key] = true
			o := obj.DeepCopy()
			o.SetAPIVersion(schema.GroupVersion{Group: gv.Group, Version: e.version}.String())
			fx.cases[e.version] = append(fx.cases[e.version], objectCase{name: name, reject: e.reject, skips: skips, obj: o})
		}
	}
	return fx, nil
}

type expectation struct {
	version string
	reject  bool
}

// parseExpect reads the value of annotationExpect.
func parseExpect(value, ownVersion string) ([]expectation, error) {
	parseAnswer := func(s string) (bool, error) {
		switch s {
		case "reject":
			return true, nil
		case "accept":
			return false, nil
		}
		return false, fmt.Errorf("%s: %q is neither accept nor reject", annotationExpect, s)
	}
	if !strings.Contains(value, "=") {
		reject, err := parseAnswer(value)
		if err != nil {
			return nil, err
		}
		return []expectation{{version: ownVersion, reject: reject}}, nil
	}
	var out []expectation
	for _, field := range strings.Fields(value) {
		version, ans, ok := strings.Cut(field, "=")
		if !ok {
			return nil, fmt.Errorf("%s: %q is not version=answer", annotationExpect, field)
		}
		reject, err := parseAnswer(ans)
		if err != nil {
			return nil, err
		}
		out = append(out, expectation{version: version, reject: reject})
	}
	return out, nil
}

// splitYAML returns the non-empty documents of a multi-document YAML stream.
func splitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("splitting YAML documents: %w", err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("converting YAML to JSON: %w", err)
		}
		if s := string(bytes.TrimSpace(j)); s != "null" && s != "{}" {
			out = append(out, doc)
		}
	}
}

// decodeObject decodes one YAML document as the apiserver decodes a request body: through JSON with
// the unstructured decoder, so that integers are int64 as CEL requires.
func decodeObject(doc []byte) (*unstructured.Unstructured, error) {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("converting YAML to JSON: %w", err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(j); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	return obj, nil
}
