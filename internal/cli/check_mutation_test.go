package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/mutate"
	"github.com/celaudit/celaudit/internal/views"
	"github.com/celaudit/celaudit/test/envtestutil"
)

const checkMutate = "testdata/check/mutate"

// TestCheckMutations checks manifests against MutatingAdmissionPolicies: results listed like the other
// policies' (judged as CREATE), the manifests as the policies leave them with --mutate, and the API server's
// messages for policies that fail. Expectations are written by hand from the fixtures' comments.
func TestCheckMutations(t *testing.T) {
	manifests, maps := filepath.Join(checkMutate, "manifests.yaml"), filepath.Join(checkMutate, "maps.yaml")
	for _, tc := range []struct {
		name   string
		args   []string
		code   ExitCode
		golden string
		want   []string // in stdout, then stderr
	}{{
		name: "table", args: []string{"-f", manifests, "--rules", maps}, code: ExitOK, golden: "mutate.table",
		want: []string{
			`~map/team-label\s+3\s+1\s+0\s+2\s+0\s+0`,
			`~map/pull-always\s+1\s+0\s+0\s+1\s+0\s+0`,
			`~warn\s+map/team-label\s+mutations\s+team-a/ConfigMap/bare\s+testdata/check/mutate/manifests.yaml:12\s+CREATE would change metadata.labels.team`,
			`~warn\s+map/pull-always\s+mutations\s+team-a/Deployment/web\s+\S+\s+CREATE would change spec.template.spec.containers\[0\].imagePullPolicy`,
			`~warn\s+map/rotate-token\s+mutations\s+team-a/Secret/creds\s+\S+\s+CREATE would change data.token`,
		},
	}, {
		name: "--mutate", args: []string{"-f", manifests, "--rules", maps, "--mutate"}, code: ExitOK, golden: "mutate.yaml",
		want: []string{
			"3 objects changed by MutatingAdmissionPolicies.",
			"note: testdata/check/mutate/manifests.yaml:28: Secret creds: the changes to its values are left out: celaudit never prints Secret data",
		},
	}, {
		name: "--mutate with -o json", args: []string{"-f", manifests, "--rules", maps, "--mutate", "-o", "json"}, code: ExitBadInput,
		want: []string{"--mutate prints YAML manifests: it does not go with -o json"},
	}, {
		name: "policies that fail: the API server's messages", args: []string{"-f", manifests, "--rules", filepath.Join(checkMutate, "broken.yaml")},
		code: ExitViolations,
		want: []string{
			`~error\s+map/broken\s+mutations\s+team-a/ConfigMap/bare\s+\S+\s+policy 'broken' with binding 'broken' denied request: compilation failed: ERROR: <input>:1:54: Syntax error`,
			`~error\s+map/needs-params\s+mutations\s+team-b/ConfigMap/other\s+\S+\s+policy 'needs-params' with binding 'needs-params' denied request: failed to configure binding: no params found for policy binding with .Deny. parameterNotFoundAction`,
			"note: a binding of map/needs-params found no params for 2 objects in namespace team-a",
		},
	}, {
		name: "a malformed policy file", args: []string{"-f", manifests, "--rules", filepath.Join(checkMutate, "bad", "malformed.yaml"), "--mutate"},
		code: ExitBadInput,
		want: []string{"~error: testdata/check/mutate/bad/malformed.yaml:[0-9]+: "},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCheck("", tc.args...)
			if code != tc.code {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			checkContains(t, stdout+stderr, tc.want)
			if strings.Contains(stdout+stderr, "c3dvcmRmaXNo") || strings.Contains(stdout+stderr, audit.RedactionMarker) {
				t.Errorf("the output holds the rotated token or a redacted value:\n%s", stdout)
			}
			if tc.golden != "" {
				checkGoldenFile(t, tc.golden, stdout)
			}
		})
	}

	t.Run("--mutate: what changes and what does not", func(t *testing.T) {
		stdout, stderr, code := runCheck("", "-f", manifests, "--rules", maps, "--mutate")
		if code != ExitOK {
			t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
		}
		objs, err := envtestutil.DecodeYAML([]byte(stdout))
		if err != nil {
			t.Fatal(err)
		}
		var order []string
		byName := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			order = append(order, o.GetKind()+"/"+o.GetName())
			byName[o.GetKind()+"/"+o.GetName()] = o
		}
		// Input order, unchanged objects included.
		want := []string{"Namespace/team-a", "ConfigMap/labelled", "ConfigMap/bare", "Deployment/web", "Secret/creds", "Namespace/team-b", "ConfigMap/other"}
		if !reflect.DeepEqual(order, want) {
			t.Fatalf("objects %v, want %v", order, want)
		}
		for _, c := range []struct {
			object string
			path   []string
			want   any // nil: absent
		}{
			{"ConfigMap/bare", []string{"metadata", "labels", "team"}, "a"},
			{"ConfigMap/labelled", []string{"metadata", "labels", "team"}, "a"},
			{"ConfigMap/other", []string{"metadata", "labels"}, nil},
			{"Secret/creds", []string{"metadata", "labels", "team"}, "a"},
			// The rotated token is a Secret value: left as the manifest has it.
			{"Secret/creds", []string{"data", "token"}, "aHVudGVyMg=="},
			// Only what the policy changes is added: not the other defaults the API server would set.
			{"Deployment/web", []string{"spec", "replicas"}, nil},
			{"Deployment/web", []string{"metadata", "namespace"}, "team-a"},
		} {
			got, found, _ := unstructured.NestedFieldNoCopy(byName[c.object].Object, c.path...)
			if !found {
				got = nil
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s %s = %v, want %v", c.object, strings.Join(c.path, "."), got, c.want)
			}
		}
		containers, _, _ := unstructured.NestedSlice(byName["Deployment/web"].Object, "spec", "template", "spec", "containers")
		if len(containers) != 1 || containers[0].(map[string]any)["imagePullPolicy"] != "Always" {
			t.Errorf("web's containers %v, want one that pulls Always", containers)
		}
	})
}

// TestCheckMutateMatchesAPIServer checks that the manifests check --mutate prints are stored as the API server
// stores the original manifests once the MutatingAdmissionPolicies are installed: a dry-run CREATE of each
// printed object before the policies exist equals a dry-run CREATE of the original with them, field for field
// (a Secret's values aside: check --mutate never prints them).
func TestCheckMutateMatchesAPIServer(t *testing.T) {
	manifests, maps := filepath.Join(checkMutate, "manifests.yaml"), filepath.Join(checkMutate, "maps.yaml")
	stdout, stderr, code := runCheck("", "-f", manifests, "--rules", maps, "--mutate")
	if code != ExitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	mutated, err := envtestutil.DecodeYAML([]byte(stdout))
	if err != nil {
		t.Fatal(err)
	}
	originals, err := envtestutil.DecodeYAML([]byte(mustRead(t, manifests)))
	if err != nil {
		t.Fatal(err)
	}
	env := envtestutil.StartForTest(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := views.LiveResources(ctx, dc)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range originals {
		if o.GetKind() == "Namespace" {
			if err := envtestutil.Apply(ctx, env.Client, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	dryCreate := func(obj *unstructured.Unstructured) (map[string]any, error) {
		r, err := resolver.ResourceForKind(obj.GroupVersionKind())
		if err != nil {
			return nil, err
		}
		out, err := dyn.Resource(r.Resource).Namespace(obj.GetNamespace()).Create(ctx, obj.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return nil, err
		}
		return created(out.Object), nil
	}
	// Before the policies: the printed manifests as the API server would store them.
	printed := map[string]map[string]any{}
	for _, o := range mutated {
		if o.GetKind() == "Namespace" {
			continue
		}
		got, err := dryCreate(o)
		if err != nil {
			t.Fatal(err)
		}
		printed[o.GetKind()+"/"+o.GetName()] = got
	}

	policies, err := envtestutil.DecodeYAML([]byte(mustRead(t, maps)))
	if err != nil {
		t.Fatal(err)
	}
	if err := envtestutil.Apply(ctx, env.Client, policies...); err != nil {
		t.Fatal(err)
	}
	// The API server applies the policies once the last one (by name: team-label) is loaded.
	probe := originals[2] // ConfigMap bare
	envtestutil.Eventually(t, 90e9, func() error {
		got, err := dryCreate(probe)
		if err != nil {
			return err
		}
		if valueAt(got, "metadata.labels.team") != "a" {
			return fmt.Errorf("the API server does not apply the policies yet")
		}
		return nil
	})
	envtestutil.Eventually(t, 90e9, func() error {
		got, err := dryCreate(originals[3]) // Deployment web
		if err != nil {
			return err
		}
		if valueAt(got, "spec.template.spec.containers.0.imagePullPolicy") != "Always" {
			return fmt.Errorf("the API server does not apply the policies yet")
		}
		return nil
	})
	for _, o := range originals {
		if o.GetKind() == "Namespace" {
			continue
		}
		want, err := dryCreate(o)
		if err != nil {
			t.Fatal(err)
		}
		got := printed[o.GetKind()+"/"+o.GetName()]
		if o.GetKind() == "Secret" {
			got, want = mutate.RedactedSecret(got), mutate.RedactedSecret(want)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s %s: the printed manifest is stored as\n%s\nthe original, with the policies, as\n%s", o.GetKind(), o.GetName(), mustJSON(got), mustJSON(want))
		}
	}
}

// created drops what the API server sets on every create whatever the policies do (uid, creationTimestamp,
// managedFields, resourceVersion, generation) and decodes numbers as encoding/json does.
func created(obj map[string]any) map[string]any {
	out := comparable(obj)
	md, _ := out["metadata"].(map[string]any)
	for _, f := range []string{"uid", "creationTimestamp"} {
		delete(md, f)
	}
	return out
}
