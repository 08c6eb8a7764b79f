package differential

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/cli"
	"github.com/celaudit/celaudit/internal/engine"
	"github.com/celaudit/celaudit/internal/vap"
	"github.com/celaudit/celaudit/test/envtestutil"
)

const (
	checkRulesFile   = "testdata/check/rules.yaml"
	checkObjectsFile = "testdata/check/objects.yaml"
	checkCRD         = "gizmos.check.example.com"
)

// TestCheckMatchesAPIServer runs `kubectl celaudit check` on the files of testdata/check, offline, and
// compares its verdicts and messages, object by object, with the API server's answer to a server-side
// dry-run create of each object once the rules are installed: rejected exactly when check predicts it, with
// check's messages (the CRD's field errors, or the policy's denial), and warned exactly with check's
// warnings. The fixture's objects need the CRD's pruning and defaulting and the API server's defaults of
// Deployments and Jobs to be judged right. The answers are also checked against the fixture's own
// expectation, and check --cluster against the installed rules must give what the files give. An object
// annotated celaudit.io/check-differs stands for a documented difference (what the API server does before
// validating that check does not, admit.NotApplied): there the two must differ.
func TestCheckMatchesAPIServer(t *testing.T) {
	ctx := context.Background()
	fromFiles := runCheckReports(t, "-f", checkObjectsFile, "--rules", checkRulesFile)

	objects := readFixture(t, checkObjectsFile)
	installCheckRules(t, ctx)
	cl := newVAPClients(t)
	resolver, err := vapResolver(ctx, cl.discovery, []schema.GroupVersionKind{{Group: "check.example.com", Version: "v1", Kind: "Gizmo"}})
	if err != nil {
		t.Fatal(err)
	}
	byObject := map[string][]audit.Result{}
	for _, r := range fromFiles {
		id := checkObjectID(r.Resource.Kind, r.Resource.Namespace, r.Resource.Name)
		byObject[id] = append(byObject[id], r)
	}
	// Policies take effect a moment after they are created: compare until the API server agrees, or fail with
	// the last differences.
	envtestutil.Eventually(t, 60*time.Second, func() error {
		var diffs []string
		for _, obj := range objects {
			id := checkObjectID(obj.GetKind(), obj.GetNamespace(), obj.GetName())
			ans, err := askCheckAPIServer(ctx, cl.dyn, resolver, obj)
			if err != nil {
				return err
			}
			if want := obj.GetAnnotations()["celaudit.io/expect"]; want != ans.verdict() {
				diffs = append(diffs, fmt.Sprintf("%s: the fixture expects %s, the apiserver %s", id, want, ans))
			}
			d := compareCheckAnswer(obj, byObject[id], ans)
			if why, known := obj.GetAnnotations()["celaudit.io/check-differs"]; known {
				// A difference the README and admit.NotApplied document: it must show, or the documentation
				// is wrong.
				if d == "" {
					diffs = append(diffs, fmt.Sprintf("%s: check and the apiserver agree although the fixture documents a difference (%s)", id, why))
				}
				continue
			}
			if d != "" {
				diffs = append(diffs, id+": "+d)
			}
		}
		if len(diffs) > 0 {
			return errors.New(strings.Join(diffs, "\n"))
		}
		return nil
	})

	// The same check with the rules read from the cluster gives the same results.
	fromCluster := runCheckReports(t, "-f", checkObjectsFile, "--cluster", "--kubeconfig", writeKubeconfig(t, env.Config))
	files, cluster := checkResultLines(fromFiles), checkResultLines(fromCluster)
	if diff := diffLines(files, cluster); diff != "" {
		t.Errorf("check with the cluster's rules differs from check with the files' rules (- files, + cluster):\n%s", diff)
	}
}

func checkObjectID(kind, namespace, name string) string { return kind + " " + namespace + "/" + name }

// runCheckReports runs check in process with -o json --results all and returns the results of the reports it
// prints, for the fixture's policies only.
func runCheckReports(t *testing.T, args ...string) []audit.Result {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	code := cli.Run(streams, append([]string{"check", "-o", "json", "--results", "all"}, args...))
	if code != int(cli.ExitViolations) {
		t.Fatalf("check %v: exit code %d, want %d; stderr:\n%s", args, code, cli.ExitViolations, errOut.String())
	}
	var list struct {
		Items []v1alpha2.PolicyReport `json:"items"` // a ClusterPolicyReport has the same results
	}
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		t.Fatalf("check printed no report List: %v\n%s", err, out.String())
	}
	var results []audit.Result
	for _, report := range list.Items {
		for _, r := range report.Results {
			if r.Policy != checkCRD && !strings.HasPrefix(r.Policy, "ck-") {
				continue
			}
			ref := r.Resources[0]
			results = append(results, audit.Result{
				Policy: r.Policy, Rule: r.Rule, Verdict: audit.Verdict(r.Result), Message: r.Message, Properties: r.Properties,
				Resource: audit.ObjectRef{APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name},
			})
		}
	}
	if len(results) == 0 {
		t.Fatalf("check %v gave no results", args)
	}
	return results
}

func checkResultLines(results []audit.Result) []string {
	out := make([]string, 0, len(results))
	for _, r := range results {
		props := make([]string, 0, len(r.Properties))
		for k, v := range r.Properties {
			if k != audit.PropResultID {
				props = append(props, k+"="+v)
			}
		}
		sort.Strings(props)
		out = append(out, fmt.Sprintf("%s %s %s %s: %s [%s]", r.Verdict, checkObjectID(r.Resource.Kind, r.Resource.Namespace, r.Resource.Name),
			r.Policy, r.Rule, r.Message, strings.Join(props, " ")))
	}
	sort.Strings(out)
	return out
}

func readFixture(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := envtestutil.DecodeYAML(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// installCheckRules creates the fixture's rules: namespaces, params and the CRD first, the policies last,
// and deletes the CRD and policies when the test ends (namespaces stay: envtest runs no namespace
// controller to finalize them).
func installCheckRules(t *testing.T, ctx context.Context) {
	t.Helper()
	rules := readFixture(t, checkRulesFile)
	var first, policies []*unstructured.Unstructured
	for _, o := range rules {
		if engine.IsPolicyObject(o) && o.GetKind() != "CustomResourceDefinition" {
			policies = append(policies, o)
		} else {
			first = append(first, o)
		}
	}
	t.Cleanup(func() {
		for _, o := range rules {
			if o.GetKind() != "Namespace" {
				_ = client.IgnoreNotFound(env.Client.Delete(context.Background(), o.DeepCopy()))
			}
		}
	})
	if err := envtestutil.Apply(ctx, env.Client, first...); err != nil {
		t.Fatal(err)
	}
	if err := envtestutil.WaitEstablished(ctx, env.Client, checkCRD); err != nil {
		t.Fatal(err)
	}
	if err := envtestutil.Apply(ctx, env.Client, policies...); err != nil {
		t.Fatal(err)
	}
}

// checkAnswer is the API server's answer to a dry-run create.
type checkAnswer struct {
	rejection *apierrors.StatusError
	warnings  []string // of the fixture's policies
}

func (a checkAnswer) verdict() string {
	switch {
	case a.rejection != nil:
		return "reject"
	case len(a.warnings) > 0:
		return "warn"
	}
	return "accept"
}

func (a checkAnswer) String() string {
	if a.rejection != nil {
		return "rejects: " + a.rejection.ErrStatus.Message
	}
	return fmt.Sprintf("accepts with warnings %q", a.warnings)
}

func askCheckAPIServer(ctx context.Context, dyn dynamic.Interface, resolver vap.ResourceResolver, obj *unstructured.Unstructured) (checkAnswer, error) {
	res, err := resolver.ResourceForKind(obj.GroupVersionKind())
	if err != nil {
		return checkAnswer{}, err
	}
	collector := &vapWarnings{}
	ctx = context.WithValue(ctx, vapWarningsKey{}, collector)
	_, err = dyn.Resource(res.Resource).Namespace(obj.GetNamespace()).Create(ctx, obj.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	var ans checkAnswer
	for _, w := range collector.get() {
		if strings.HasPrefix(w, "Validation failed for ValidatingAdmissionPolicy 'ck-") {
			ans.warnings = append(ans.warnings, w)
		}
	}
	if err != nil {
		if !errors.As(err, &ans.rejection) {
			return checkAnswer{}, fmt.Errorf("dry-run create of %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return ans, nil
}

// compareCheckAnswer returns how the API server's answer differs from what check's results predict, "" when
// it does not. A CRD's field errors reject the object before any admission policy runs; otherwise the
// policies' results predict the denial and warnings as in vap_test.go (predictAPIServer).
func compareCheckAnswer(obj *unstructured.Unstructured, results []audit.Result, ans checkAnswer) string {
	var crdErrors, policyResults []audit.Result
	for _, r := range results {
		switch {
		case r.Policy == checkCRD && (r.Verdict == audit.Fail || r.Verdict == audit.Error):
			crdErrors = append(crdErrors, r)
		case r.Policy != checkCRD:
			policyResults = append(policyResults, r)
		}
	}
	if len(crdErrors) > 0 {
		if ans.rejection == nil {
			return fmt.Sprintf("check fails the object, the apiserver %s", ans)
		}
		text := ans.rejection.ErrStatus.Message
		if !strings.HasPrefix(text, fmt.Sprintf("Gizmo.check.example.com %q is invalid: ", obj.GetName())) {
			return "the apiserver rejects it otherwise than for its fields: " + text
		}
		var missing []string
		for _, r := range crdErrors {
			if !strings.Contains(text, r.Message) {
				missing = append(missing, r.Message)
			}
		}
		// Every field error of the apiserver is one of check's, a skip result standing for the apiserver's note
		// that rules were not checked.
		_, rest, _ := strings.Cut(text, " is invalid: ")
		for _, r := range results {
			if r.Policy == checkCRD {
				rest = strings.Replace(rest, r.Message, "", 1)
			}
		}
		if rest = strings.Trim(rest, "[], "); rest != "" {
			missing = append(missing, "(apiserver) "+rest)
		}
		if len(missing) > 0 {
			return fmt.Sprintf("messages differ: %q not in both; apiserver: %s", missing, text)
		}
		return ""
	}
	want := predictAPIServer(policyResults, func(r audit.Result) vapRoute {
		var actions []admissionregistrationv1.ValidationAction
		for _, a := range strings.Split(r.Properties[audit.PropValidationActions], ",") {
			if a = strings.TrimSpace(a); a != "" {
				actions = append(actions, admissionregistrationv1.ValidationAction(a))
			}
		}
		return vapRoute{policy: r.Policy, binding: r.Properties[audit.PropBinding], actions: actions}
	})
	var diffs []string
	switch {
	case ans.rejection == nil && len(want.denials) > 0:
		diffs = append(diffs, fmt.Sprintf("check predicts the denial %q, the apiserver %s", want.denialTexts(), ans))
	case ans.rejection != nil && len(want.denials) == 0:
		diffs = append(diffs, fmt.Sprintf("check predicts no denial, the apiserver %s", ans))
	case ans.rejection != nil:
		_, message, _ := strings.Cut(ans.rejection.ErrStatus.Message, " is forbidden: ")
		if !slices.Contains(want.denialTexts(), message) {
			diffs = append(diffs, fmt.Sprintf("denials differ: check %q, apiserver %q", want.denialTexts(), message))
		}
	}
	var wantWarnings []string
	for _, w := range want.warnings {
		wantWarnings = append(wantWarnings, w.text)
	}
	if got, wanted := sortedUnique(ans.warnings), sortedUnique(wantWarnings); !slices.Equal(got, wanted) {
		diffs = append(diffs, fmt.Sprintf("warnings differ: check %q, apiserver %q", wanted, got))
	}
	return strings.Join(diffs, "; ")
}

// writeKubeconfig writes a kubeconfig file for cfg, as a user of the cluster has one.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
