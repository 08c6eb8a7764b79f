package chart_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/celaudit/celaudit/test/envtestutil"
)

const (
	release   = "celaudit"
	namespace = "celaudit-system"
	// listAll is --report-results with policyReporter.listPasses.
	listAll = "--report-results=pass,fail,warn,error,skip"
)

var (
	repoRoot = envtestutil.RepoRoot()
	chartDir = filepath.Join(repoRoot, "charts", "celaudit")
)

// helm runs the Helm CLI with its own empty configuration, cache and data directories.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		t.Fatal("HELM is not set: run the tests with 'make test' or 'make test-chart' (hack/setup-helm.sh builds helm)")
	}
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), errors.New("helm " + strings.Join(args, " ") + ": " + err.Error() + "\n" + stderr.String() + stdout.String())
	}
	return stdout.String(), nil
}

func mustHelm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// render renders the chart as release "celaudit" in namespace "celaudit-system", crds/ included, with the
// given extra arguments (--set ...).
func render(t *testing.T, args ...string) objects {
	t.Helper()
	return decode(t, mustHelm(t, append([]string{"template", release, chartDir, "--namespace", namespace, "--include-crds"}, args...)...))
}

type objects []*unstructured.Unstructured

func decode(t *testing.T, manifests string) objects {
	t.Helper()
	var out objects
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decoding rendered manifests: %v", err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

func decodeFile(t *testing.T, path string) objects {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, string(data))
}

// find returns the object of that kind and name, or nil.
func (o objects) find(kind, name string) *unstructured.Unstructured {
	for _, u := range o {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}

func (o objects) mustFind(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	u := o.find(kind, name)
	if u == nil {
		t.Fatalf("no %s %q rendered; rendered: %v", kind, name, o.names())
	}
	return u
}

func (o objects) names() []string {
	out := make([]string, 0, len(o))
	for _, u := range o {
		out = append(out, u.GetKind()+"/"+u.GetName())
	}
	return out
}

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		t.Fatalf("converting %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &out
}

func (o objects) deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	return convert[appsv1.Deployment](t, o.mustFind(t, "Deployment", "celaudit-controller-manager"))
}

// args returns the manager container's arguments.
func (o objects) args(t *testing.T) []string {
	t.Helper()
	return o.deployment(t).Spec.Template.Spec.Containers[0].Args
}

func (o objects) rules(t *testing.T, kind, name string) []rbacv1.PolicyRule {
	t.Helper()
	return convert[rbacv1.ClusterRole](t, o.mustFind(t, kind, name)).Rules
}

// flag returns the arguments that set the flag (--name or --name=value).
func flag(args []string, name string) []string {
	var out []string
	for _, a := range args {
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			out = append(out, a)
		}
	}
	return out
}
