package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/test/envtestutil"
)

// The fixture of the client tests: limitKinds CRDs of group limitsGroup, each with an even and an odd
// object stored in limitsNamespace. Kind 0's version is deprecated, so that every read of its objects
// carries the API server's warning deprecationWarning.
const (
	limitsGroup        = "limits.test.celaudit.io"
	limitsNamespace    = "limits"
	limitKinds         = 40
	deprecationWarning = "limits.test.celaudit.io/v1 Thing0 is deprecated: a warning of the API server"
)

// thingCRD returns CRD i; tightened, it adds the rule that replicas are even.
func thingCRD(i int, tightened bool) *apiextensionsv1.CustomResourceDefinition {
	spec := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"replicas": {Type: "integer"},
	}}
	if tightened {
		spec.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.replicas % 2 == 0", Message: "replicas must be even"}}
	}
	kind := "Thing" + strconv.Itoa(i)
	plural := strings.ToLower(kind) + "s"
	version := apiextensionsv1.CustomResourceDefinitionVersion{
		Name: "v1", Served: true, Storage: true,
		Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec},
		}},
	}
	if i == 0 {
		version.Deprecated, version.DeprecationWarning = true, ptr.To(deprecationWarning)
	}
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + limitsGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group:    limitsGroup,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
			Scope:    apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version},
		},
	}
}

// thingPolicy returns policy i and its binding, which deny Things of kind i with more than 100 replicas
// (none has).
func thingPolicy(i int) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	name := fmt.Sprintf("limits-thing%d", i)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{limitsGroup}, APIVersions: []string{"v1"},
						Resources: []string{fmt.Sprintf("thing%ds", i)}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= 100", Message: "at most 100 replicas"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}

// writeYAML writes objs as one YAML stream in the test's temporary directory and returns its path.
func writeYAML(t *testing.T, name string, objs ...any) string {
	t.Helper()
	var docs []string
	for _, o := range objs {
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// storeThings installs the limitKinds live CRDs and stores their objects; it returns the proposal that
// tightens every CRD and adds a policy and binding for each.
func storeThings(t *testing.T, env *envtestutil.Env) string {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: limitsNamespace}}); err != nil {
		t.Fatal(err)
	}
	var proposal []any
	for i := range limitKinds {
		live := thingCRD(i, false)
		if err := env.Client.Create(ctx, live); err != nil {
			t.Fatal(err)
		}
		policy, binding := thingPolicy(i)
		proposal = append(proposal, thingCRD(i, true), policy, binding)
	}
	for i := range limitKinds {
		crd := thingCRD(i, false)
		if err := envtestutil.WaitEstablished(ctx, env.Client, crd.Name); err != nil {
			t.Fatal(err)
		}
		for _, replicas := range []int64{2, 3} {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": limitsGroup + "/v1", "kind": crd.Spec.Names.Kind,
				"metadata": map[string]any{"namespace": limitsNamespace, "name": fmt.Sprintf("replicas-%d", replicas)},
				"spec":     map[string]any{"replicas": replicas},
			}}
			// The API server takes a moment more to serve a CRD it reports established.
			envtestutil.Eventually(t, time.Minute, func() error { return env.Client.Create(ctx, obj.DeepCopy()) })
		}
	}
	return writeYAML(t, "proposal.yaml", proposal...)
}

// newlyRejectsOne reports whether the whatif table says that each tightened CRD matches both objects of its
// kind and newly rejects one.
func newlyRejectsOne(table string) bool {
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) == 5 && strings.HasPrefix(f[0], "crd/thing") {
			if f[1] != "2" || f[2] != "1" {
				return false
			}
			rows++
		}
	}
	return rows == limitKinds
}

// throttling is what one run's log says of the client-side rate limiter: the plugin's count of the
// requests that waited for it, and client-go's own lines for the requests that waited long (over 50 ms).
type throttling struct {
	requests, waited int
	clientGoWaits    int
}

var limiterLine = regexp.MustCompile(`"Client-side rate limiter" requests=(\d+) waited=(\d+)`)

func throttlingOf(t *testing.T, errOut string) throttling {
	t.Helper()
	m := limiterLine.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("no rate limiter line at -v=3 in:\n%s", errOut)
	}
	requests, _ := strconv.Atoi(m[1])
	waited, _ := strconv.Atoi(m[2])
	return throttling{requests: requests, waited: waited, clientGoWaits: strings.Count(errOut, `"Waited before sending request"`)}
}

// TestWhatifClientLimits runs whatif on a proposal of 40 tightened CRDs, 40 policies and 40 bindings. At the
// plugin's default limits no request waits for the client-side rate limiter; at client-go's old default of
// 5 requests per second (burst 10), set with the operator's flag names, most do, with the same output. The
// limiter is one for the whole run: the CRDs' GETs and the stored objects' LISTs all go through it. The API
// server's warnings are printed once each on stderr, and -v traces requests as kubectl's does.
func TestWhatifClientLimits(t *testing.T) {
	env := envtestutil.StartForTest(t)
	kubeconfig := env.KubeconfigFile(t)
	proposal := storeThings(t, env)

	whatif := func(t *testing.T, args ...string) (string, string) {
		t.Helper()
		code, out, errOut := run(t, kubeconfig, append([]string{"whatif", "-f", proposal}, args...)...)
		// Every CRD newly rejects its odd object.
		if code != 1 || !newlyRejectsOne(out) {
			t.Fatalf("whatif %v: exit %d, want 1 and a new rejection for each CRD:\n%s\n%s", args, code, out, errOut)
		}
		return out, errOut
	}

	out, errOut := whatif(t, "-v=3")
	fast := throttlingOf(t, errOut)
	// At least the GET of each live CRD (a dynamic client) and the LIST of each CRD's objects (the listjson
	// client) go through the limiter.
	if fast.requests < 2*limitKinds {
		t.Errorf("%d requests went through the rate limiter, want at least %d: not every client shares it", fast.requests, 2*limitKinds)
	}
	if fast.waited != 0 || fast.clientGoWaits != 0 {
		t.Errorf("at the default limits %d of %d requests waited for the client-side rate limiter (client-go logged %d long waits), want none",
			fast.waited, fast.requests, fast.clientGoWaits)
	}

	slowOut, slowErrOut := whatif(t, "-v=3", "--kube-api-qps=5", "--kube-api-burst=10")
	slow := throttlingOf(t, slowErrOut)
	if slow.requests != fast.requests {
		t.Errorf("%d requests at 5 QPS, %d at the default limits: want the same run", slow.requests, fast.requests)
	}
	// Beyond the burst of 10, a request waits unless the 200 ms a token takes have passed since the last one.
	if slow.waited < slow.requests/2 || slow.clientGoWaits < slow.requests/2 {
		t.Errorf("at 5 QPS, burst 10: %d of %d requests waited, %d long waits logged by client-go; want most", slow.waited, slow.requests, slow.clientGoWaits)
	}
	if slowOut != out {
		t.Errorf("output differs with the limits:\n%s\nwant\n%s", slowOut, out)
	}

	t.Run("warnings once each", func(t *testing.T) {
		// In pages of one object, each of Thing0's LISTs carries the deprecation warning.
		out, errOut := whatif(t, "--chunk-size=1")
		if n := strings.Count(errOut, "Warning: "+deprecationWarning+"\n"); n != 1 {
			t.Errorf("the API server's warning printed %d times on stderr, want once:\n%s", n, errOut)
		}
		if strings.Contains(out, "Warning") {
			t.Errorf("warning in the output:\n%s", out)
		}
	})

	t.Run("-v traces requests", func(t *testing.T) {
		_, quiet := whatif(t)
		_, traced := whatif(t, "-v", "6")
		request := regexp.MustCompile(`"Response" verb="GET" url="https://[^"]+/apis/apiextensions.k8s.io/v1/customresourcedefinitions/thing0s.` +
			regexp.QuoteMeta(limitsGroup) + `" status="200 OK"`)
		if !request.MatchString(traced) || strings.Contains(quiet, `"Response"`) {
			t.Errorf("want the requests traced at -v 6 and not without:\n-v 6: %s\nwithout: %s", traced, quiet)
		}
	})
}
