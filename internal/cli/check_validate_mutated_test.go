package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/test/envtestutil"
)

const checkMutateValidate = "testdata/check/mutate-validate"

// The Secret values of the mutate-validate fixtures: the password the manifest holds (a policy moves it, as
// stored, into a label) and the token a policy sets (and copies into a label in plain text).
var mutateValidateSecrets = []string{"aHVudGVyMi1vcmlnaW5hbC14", "hunter2-original-x", "cm90YXRlZC1zd29yZGZpc2gtNDI=", "rotated-swordfish-42"}

// refusal is what refuses an object: a policy as "<policyKind>/<name>" and its message.
type refusal struct {
	policy, message string
}

// checkRefusals returns, by "<Kind>/<namespace>/<name>", the fail and error results of check -o json: what
// the API server would refuse the object for.
func checkRefusals(t *testing.T, out string) map[string][]refusal {
	t.Helper()
	var list struct {
		Items []struct {
			Results []struct {
				Policy     string            `json:"policy"`
				Result     string            `json:"result"`
				Message    string            `json:"message"`
				Properties map[string]string `json:"properties"`
				Resources  []struct {
					Kind, Namespace, Name string
				} `json:"resources"`
			} `json:"results"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%v in\n%s", err, out)
	}
	got := map[string][]refusal{}
	for _, item := range list.Items {
		for _, r := range item.Results {
			if r.Result != string(audit.Fail) && r.Result != string(audit.Error) {
				continue
			}
			if len(r.Resources) != 1 {
				t.Fatalf("result %+v names %d objects", r, len(r.Resources))
			}
			o := r.Resources[0]
			key := o.Kind + "/" + o.Namespace + "/" + o.Name
			got[key] = append(got[key], refusal{policy: r.Properties[audit.PropPolicyKind] + "/" + r.Policy, message: r.Message})
		}
	}
	return got
}

// TestCheckValidatesMutatedObjects checks that check validates each manifest as the MutatingAdmissionPolicies
// leave it, as the API server validates a CREATE after mutating admission: for every object, the policies
// check says refuse it are the ones written by hand below, and the API server, with the same policies and CRD
// installed, answers a dry-run CREATE of the manifest as written by admitting the same objects and refusing the
// others with check's messages. A policy that fails under failurePolicy Fail refuses the request before any
// validation: its error is the object's only refusal. No Secret value is in any of check's outputs.
func TestCheckValidatesMutatedObjects(t *testing.T) {
	manifests, rules := filepath.Join(checkMutateValidate, "manifests.yaml"), filepath.Join(checkMutateValidate, "rules.yaml")
	// A ConfigMap whose data are over the API server's 1 MiB limit, its body under the 3 MiB one.
	big := filepath.Join(t.TempDir(), "big.yaml")
	trimmed := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: trimmed, namespace: team-a}\ndata: {small: s, big: %s}\n",
		strings.Repeat("x", 1100<<10))
	if err := os.WriteFile(big, []byte(trimmed), 0o600); err != nil {
		t.Fatal(err)
	}
	const vapKind, mapKind, crdKind = "ValidatingAdmissionPolicy/", "MutatingAdmissionPolicy/", "CustomResourceDefinition/"
	want := map[string]struct {
		refusedBy []string // what check refuses the object for, sorted; none: admitted
		server    string   // in the API server's refusal
	}{
		"ConfigMap/team-a/plain": {}, // the team label required is added
		"ConfigMap/team-a/old-app": {refusedBy: []string{vapKind + "no-legacy"},
			server: "ValidatingAdmissionPolicy 'no-legacy' with binding 'no-legacy' denied request: the legacy tier is retired"},
		"ConfigMap/other/plain": {refusedBy: []string{vapKind + "require-team"},
			server: "ValidatingAdmissionPolicy 'require-team' with binding 'require-team' denied request: team label required"},
		// require-team would refuse it too, but validation never runs.
		"ConfigMap/other/refused-app": {refusedBy: []string{mapKind + "refuse"},
			server: "policy 'refuse' with binding 'refuse' denied request: JSON Patch: remove operation does not apply"},
		"Widget/team-a/grow": {refusedBy: []string{crdKind + "widgets.example.com"},
			server: `spec.size: Unsupported value: "huge": supported values: "small", "large"`},
		"Widget/team-a/steady": {},
		// Its data are over 1 MiB until the trim policy removes the big key.
		"ConfigMap/team-a/trimmed": {},
		"Secret/team-a/creds": {refusedBy: []string{vapKind + "no-token"},
			server: "ValidatingAdmissionPolicy 'no-token' with binding 'no-token' denied request: tokens are retired, rotated to rotated-swordfish-42 from aHVudGVyMi1vcmlnaW5hbC14"},
	}

	var outputs []string
	for _, args := range [][]string{{"-o", "json"}, {}, {"--mutate"}} {
		stdout, stderr, code := runCheck("", append([]string{"-f", manifests, "-f", big, "--rules", rules}, args...)...)
		if code != ExitViolations {
			t.Fatalf("check %v: exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, ExitViolations, shorten(stdout), stderr)
		}
		secrets := mutateValidateSecrets
		if slices.Contains(args, "--mutate") {
			secrets = secrets[1:] // --mutate prints the manifests, the Secret's data as written
		}
		for _, secret := range secrets {
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("check %v prints the Secret value %q:\n%s\n%s", args, secret, shorten(stdout), stderr)
			}
		}
		outputs = append(outputs, stdout)
		// The note on what check does not apply no longer counts these policies in.
		if !strings.Contains(stderr, "and mutating admission other than MutatingAdmissionPolicies (") || strings.Contains(stderr, "mutating webhooks and policies") {
			t.Errorf("check %v: the note on what is not applied is not the one for MutatingAdmissionPolicies given:\n%s", args, stderr)
		}
	}
	got := checkRefusals(t, outputs[0])
	for key, w := range want {
		var policies []string
		for _, r := range got[key] {
			policies = append(policies, r.policy)
		}
		slices.Sort(policies)
		if !slices.Equal(policies, w.refusedBy) {
			t.Errorf("%s: check refuses it for %v, want %v", key, policies, w.refusedBy)
		}
	}
	for key := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("%s: check refuses it for %v, want it admitted", key, got[key])
		}
	}

	// The API server's answers, with the same rules.
	env := envtestutil.StartForTest(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := envtestutil.DecodeYAML([]byte(mustRead(t, manifests) + "---\n" + trimmed))
	if err != nil {
		t.Fatal(err)
	}
	policies, err := envtestutil.DecodeYAML([]byte(mustRead(t, rules)))
	if err != nil {
		t.Fatal(err)
	}
	var namespaces, judged []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			namespaces = append(namespaces, o)
		} else {
			judged = append(judged, o)
		}
	}
	if err := envtestutil.Apply(ctx, env.Client, append(namespaces, policies...)...); err != nil {
		t.Fatal(err)
	}
	resources := map[string]schema.GroupVersionResource{
		"ConfigMap": {Version: "v1", Resource: "configmaps"},
		"Secret":    {Version: "v1", Resource: "secrets"},
		"Widget":    {Group: "example.com", Version: "v1", Resource: "widgets"},
	}
	// serverAnswer is the API server's refusal of a dry-run CREATE of o, "" when it admits it.
	serverAnswer := func(o *unstructured.Unstructured) (string, error) {
		_, err := dyn.Resource(resources[o.GetKind()]).Namespace(o.GetNamespace()).Create(ctx, o.DeepCopy(),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return "", nil
		}
		return err.Error(), nil
	}
	objectKey := func(o *unstructured.Unstructured) string {
		return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
	}
	// The API server applies the policies once it has loaded them all (and knows the CRD's kind).
	answers := map[string]string{}
	envtestutil.Eventually(t, 120e9, func() error {
		for _, o := range judged {
			key := objectKey(o)
			answer, err := serverAnswer(o)
			if err != nil {
				return err
			}
			answers[key] = answer
			w := want[key]
			if (answer == "") != (w.server == "") || !strings.Contains(answer, w.server) {
				return fmt.Errorf("%s: the API server answers %q, want a refusal with %q (none: admitted)", key, answer, w.server)
			}
		}
		return nil
	})
	// check's messages are the API server's (Secret values redacted).
	for key, refusals := range got {
		server := answers[key]
		for _, secret := range mutateValidateSecrets {
			server = strings.ReplaceAll(server, secret, audit.RedactionMarker)
		}
		for _, r := range refusals {
			if !strings.Contains(server, r.message) {
				t.Errorf("%s: check refuses it for %s with %q; the API server: %q", key, r.policy, r.message, server)
			}
		}
	}
}

// shorten cuts the lines of out that hold the big ConfigMap's data, for failure messages.
func shorten(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if len(l) > 1000 {
			lines[i] = l[:100] + "..."
		}
	}
	return strings.Join(lines, "\n")
}

// TestCheckNotAppliedNote checks the note on what check does not apply: mutating admission as a whole without
// MutatingAdmissionPolicies among the rules, the rest of it with some.
func TestCheckNotAppliedNote(t *testing.T) {
	for _, tc := range []struct {
		name, manifests, rules, want string
	}{
		{"no MutatingAdmissionPolicies", "testdata/check/manifests", "testdata/check/rules", "and mutating admission (ServiceAccount token volumes, DefaultTolerationSeconds, LimitRanger, mutating webhooks and policies)\n"},
		{"MutatingAdmissionPolicies", filepath.Join(checkMutate, "manifests.yaml"), filepath.Join(checkMutate, "maps.yaml"), "and mutating admission other than MutatingAdmissionPolicies (ServiceAccount token volumes, DefaultTolerationSeconds, LimitRanger, mutating webhooks)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, _ := runCheck("", "-f", tc.manifests, "--rules", tc.rules)
			if !strings.Contains(stderr, "built-in objects were judged with the API server's defaults, but without system metadata") || !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr\n%s\nwant the note ending in %q", stderr, tc.want)
			}
		})
	}
}
