package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/whatif"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// TestWhatifMutations runs whatif with proposed MutatingAdmissionPolicies against a real API server holding
// testdata/whatif/mutate/cluster.yaml (objects stored before today's chain, add-owner): golden outputs checked
// against expectations written by hand from the fixtures' comments, and the objects --diff shows compared with
// what the API server returns for a dry-run UPDATE once the proposal is installed.
func TestWhatifMutations(t *testing.T) {
	env := envtestutil.StartForTest(t)
	ctx := context.Background()
	data := func(name string) string { return filepath.Join("testdata", "whatif", "mutate", name) }
	objs, err := envtestutil.DecodeYAML([]byte(mustRead(t, data("cluster.yaml"))))
	if err != nil {
		t.Fatal(err)
	}
	if err := envtestutil.Apply(ctx, env.Client, objs...); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	plain := ref{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, namespace: "wm-shop", name: "plain"}
	// Today's chain is enforced: a no-op update of a ConfigMap without owner gets owner: unknown.
	waitForChain(t, dyn, plain, "metadata.labels.owner", "unknown")
	kubeconfig := env.KubeconfigFile(t)

	cases := []whatifCase{
		{
			name: "proposed chain, table", args: []string{"whatif", "-f", data("proposal.yaml")}, code: ExitOK, golden: "mutate.table",
			want: []string{
				// add-owner's value changes: each drift of today is fixed and a new one takes its place.
				`~map/add-owner\s+2\s+2\s+2\s+0`,
				`~map/gizmo-tags\s+1\s+1\s+0\s+0`,
				`~new\s+warn\s+map/gizmo-tags\s+wm-shop\s+Gizmo/small\s+UPDATE\s+spec.tags\[1\]`,
				`~map/orphan\s+0\s+0\s+0\s+0`,
				`~map/pull-always\s+1\s+1\s+0\s+0`,
				`~map/secret-token\s+1\s+1\s+0\s+0`,
				// tagged is already in shape: matched, nothing new.
				`~map/team-label\s+3\s+2\s+0\s+0`,
				`~new\s+warn\s+map/add-owner\s+wm-lab\s+ConfigMap/plain\s+UPDATE\s+metadata.labels.owner`,
				`~fixed\s+warn\s+map/add-owner\s+wm-lab\s+ConfigMap/plain\s+UPDATE\s+metadata.labels.owner`,
				`~new\s+warn\s+map/pull-always\s+wm-shop\s+Deployment/web\s+UPDATE\s+spec.template.spec.containers\[0\].imagePullPolicy`,
				`~new\s+warn\s+map/secret-token\s+wm-shop\s+Secret/creds\s+UPDATE\s+data.token`,
				`~new\s+warn\s+map/team-label\s+wm-shop\s+ConfigMap/plain\s+UPDATE\s+metadata.labels.team`,
				`~new\s+warn\s+map/team-label\s+wm-shop\s+Secret/creds\s+UPDATE\s+metadata.labels.team`,
				"note: MutatingAdmissionPolicy orphan has no MutatingAdmissionPolicyBinding in the files or the cluster: the API server does not apply it",
			},
		},
		{
			name: "proposed chain, yaml with whole patches", args: []string{"whatif", "-f", data("proposal.yaml"), "-o", "yaml"}, code: ExitOK,
			golden: "mutate.yaml",
			want: []string{
				"policyKind: MutatingAdmissionPolicy",
				`patch: '[{"op":"replace","path":"/spec/template/spec/containers/0/imagePullPolicy","value":"Always"}]'`,
				`patch: '[{"op":"add","path":"/metadata/labels","value":{"owner":"nobody"}}]'`,
				`patch: '[{"op":"replace","path":"/data/token","value":"[redacted]"}]'`,
				"whatif: new", "operation: UPDATE",
			},
		},
		{
			name: "proposed chain, diff", args: []string{"whatif", "-f", data("proposal.yaml"), "--diff"}, code: ExitOK, golden: "mutate.diff",
			want: []string{
				"diff -u -N LIVE/v1.ConfigMap.wm-lab.plain MERGED/v1.ConfigMap.wm-lab.plain",
				"--- LIVE/v1.Secret.wm-shop.creds",
				"+++ MERGED/v1.Secret.wm-shop.creds",
				"-  token: '[redacted]'",
				"+  token: '[redacted] (changed)'",
				"+        imagePullPolicy: Always",
				"-        imagePullPolicy: IfNotPresent",
				"+    owner: nobody",
				"+    team: platform",
				// The tags are a set: the CRD's schema merges them.
				"   - blue\n+  - audited\n",
			},
		},
		{name: "a policy the API server would reject", args: []string{"whatif", "-f", data("bad-map.yaml")}, code: ExitBadInput,
			want: []string{
				"~testdata/whatif/mutate/bad-map.yaml:[0-9]+: the API server would reject MutatingAdmissionPolicy broken: .*compilation failed: ERROR: <input>:1:54: Syntax error",
			}},
		{name: "--diff with -o yaml", args: []string{"whatif", "-f", data("proposal.yaml"), "--diff", "-o", "yaml"}, code: ExitBadInput,
			want: []string{"--diff prints diffs: it does not go with -o yaml"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runPlugin(append(tc.args, "--kubeconfig", kubeconfig), tc.stdin)
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			checkContains(t, stdout+stderr, tc.want)
			// A Secret's values, stored or proposed, are never printed.
			for _, secret := range []string{"aHVudGVyMg==", "hunter2", "c3dvcmRmaXNo", "swordfish"} {
				if strings.Contains(stdout+stderr, secret) {
					t.Errorf("the output holds the Secret value %q:\n%s", secret, stdout)
				}
			}
			if tc.golden != "" {
				checkGolden(t, filepath.Join("testdata", "whatif", "golden", tc.golden), normalizeYAML(normalizeWhatif(stdout)))
			}
		})
	}

	t.Run("the objects --diff shows are the API server's", func(t *testing.T) {
		flags := genericclioptions.NewConfigFlags(false)
		flags.KubeConfig = &kubeconfig
		o := &whatifOptions{outputOptions: newOutputOptions(OutputTable), Filenames: []string{data("proposal.yaml")}, Diff: true,
			ChunkSize: whatif.DefaultPageSize, flags: flags, streams: genericiooptions.NewTestIOStreamsDiscard(), now: time.Now}
		outcome, _, err := o.evaluate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mutations := outcome.Mutations()
		var names []string
		for _, m := range mutations {
			names = append(names, m.Object.GetNamespace()+"/"+m.Object.GetKind()+"/"+m.Object.GetName())
		}
		if want := []string{"wm-lab/ConfigMap/plain", "wm-shop/Secret/creds", "wm-shop/ConfigMap/plain", "wm-shop/Gizmo/small", "wm-shop/Deployment/web"}; !reflect.DeepEqual(names, want) {
			t.Fatalf("changed objects %v, want %v", names, want)
		}

		// Install the proposal: the API server now runs the proposed chain.
		proposal, err := envtestutil.DecodeYAML([]byte(mustRead(t, data("proposal.yaml"))))
		if err != nil {
			t.Fatal(err)
		}
		maps := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}
		for _, p := range proposal {
			if p.GetKind() == "MutatingAdmissionPolicy" && p.GetName() == "add-owner" {
				live, err := dyn.Resource(maps).Get(ctx, "add-owner", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				p.SetResourceVersion(live.GetResourceVersion())
				if _, err := dyn.Resource(maps).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := envtestutil.Apply(ctx, env.Client, p); err != nil {
				t.Fatal(err)
			}
		}
		web := ref{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, namespace: "wm-shop", name: "web"}
		waitForChain(t, dyn, plain, "metadata.labels.owner", "nobody")
		waitForChain(t, dyn, plain, "metadata.labels.team", "platform")
		waitForChain(t, dyn, web, "spec.template.spec.containers.0.imagePullPolicy", "Always")
		creds := ref{gvr: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, namespace: "wm-shop", name: "creds"}
		waitForChain(t, dyn, creds, "metadata.labels.team", "platform")
		small := ref{gvr: schema.GroupVersionResource{Group: "mutate.example.com", Version: "v1", Resource: "gizmos"}, namespace: "wm-shop", name: "small"}
		waitForChain(t, dyn, small, "spec.tags.1", "audited")

		for _, m := range mutations {
			_, shown, err := mutatedObject(m.Object, m.Patch)
			if err != nil {
				t.Fatal(err)
			}
			answer := dryRunUpdate(t, dyn, ref{gvr: m.Resource, namespace: m.Object.GetNamespace(), name: m.Object.GetName()})
			if m.Resource.Resource == "secrets" {
				answer = mutate.RedactedSecret(answer)
				if token, _, _ := unstructured.NestedString(answer, "data", "token"); token != audit.RedactionMarker {
					t.Errorf("the API server's Secret is not redacted: token %q", token)
				}
			}
			if got, want := comparable(shown), comparable(answer); !reflect.DeepEqual(got, want) {
				t.Errorf("%s %s/%s: --diff shows\n%s\nthe API server stores\n%s", m.Object.GetKind(), m.Object.GetNamespace(), m.Object.GetName(),
					mustJSON(got), mustJSON(want))
			}
		}
	})
}

// Values of YAML reports that differ between runs.
var (
	yamlResultID          = regexp.MustCompile(`resultID: [0-9a-f]+`)
	yamlTimestamp         = regexp.MustCompile(`seconds: [0-9]+`)
	yamlCreationTimestamp = regexp.MustCompile(`creationTimestamp: "[^"]+"`)
	yamlResourceVersion   = regexp.MustCompile(`resourceVersion: "[0-9]+"`)
)

// normalizeYAML replaces, in YAML reports, what differs between runs with stable placeholders.
func normalizeYAML(out string) string {
	out = yamlResultID.ReplaceAllString(out, "resultID: <id>")
	out = yamlCreationTimestamp.ReplaceAllString(out, `creationTimestamp: "<time>"`)
	out = yamlResourceVersion.ReplaceAllString(out, `resourceVersion: "<version>"`)
	return yamlTimestamp.ReplaceAllString(out, "seconds: 0")
}

// ref names a stored object.
type ref struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

// dryRunUpdate returns what the API server would store for a no-op UPDATE of the stored object.
func dryRunUpdate(t *testing.T, dyn dynamic.Interface, r ref) map[string]any {
	t.Helper()
	res := dyn.Resource(r.gvr).Namespace(r.namespace)
	stored, err := res.Get(context.Background(), r.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := res.Update(context.Background(), stored, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Object
}

// waitForChain waits until a dry-run no-op UPDATE of the object sets the field (a dotted path; numbers index
// lists) to want: the API server's policies have caught up with the last change.
func waitForChain(t *testing.T, dyn dynamic.Interface, r ref, field, want string) {
	t.Helper()
	envtestutil.Eventually(t, 90*time.Second, func() error {
		res := dyn.Resource(r.gvr).Namespace(r.namespace)
		stored, err := res.Get(context.Background(), r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		out, err := res.Update(context.Background(), stored, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if got := valueAt(out.Object, field); got != want {
			return fmt.Errorf("%s of %s/%s is %q, want %q", field, r.namespace, r.name, got, want)
		}
		return nil
	})
}

// valueAt returns the string at a dotted path of obj, "" when there is none.
func valueAt(obj any, path string) string {
	for _, seg := range strings.Split(path, ".") {
		switch n := obj.(type) {
		case map[string]any:
			obj = n[seg]
		case []any:
			var i int
			if _, err := fmt.Sscan(seg, &i); err != nil || i >= len(n) {
				return ""
			}
			obj = n[i]
		default:
			return ""
		}
	}
	s, _ := obj.(string)
	return s
}

// comparable drops what the API server sets on every write whatever the policies do (resourceVersion,
// generation, managedFields) and decodes numbers as encoding/json does.
func comparable(obj map[string]any) map[string]any {
	data, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(data, &out); err != nil {
		panic(err)
	}
	md, _ := out["metadata"].(map[string]any)
	for _, f := range []string{"managedFields", "resourceVersion", "generation"} {
		delete(md, f)
	}
	return out
}
