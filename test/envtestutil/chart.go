package envtestutil

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/celaudit/celaudit/controllers"
)

// ChartInstall is celaudit as the Helm chart installs it: its ServiceAccount with the rendered RBAC, and the
// arguments the rendered Deployment (or sharded StatefulSet) passes.
type ChartInstall struct {
	Identity
	// Args are the manager container's arguments.
	Args []string
}

// RenderChart renders charts/celaudit with the pinned Helm CLI ($HELM, built by hack/setup-helm.sh) as
// release in namespace, with further arguments for helm template (--set ...), and decodes the objects.
func RenderChart(t testing.TB, release, namespace string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		t.Fatal("HELM is not set: run the tests with 'make test' or 'make test-chart' (hack/setup-helm.sh builds helm)")
	}
	home := t.TempDir()
	cmd := exec.Command(bin, append([]string{"template", release, filepath.Join(RepoRoot(), "charts", "celaudit"), "--namespace", namespace}, args...)...)
	// Helm's own empty configuration, cache and data: no repositories or plugins of the machine.
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	objs, err := DecodeYAML(stdout.Bytes())
	if err != nil {
		t.Fatalf("decoding the rendered chart: %v", err)
	}
	return objs
}

// ChartIdentity renders the chart (see RenderChart) as release "celaudit" in namespace "celaudit-system",
// creates the namespace, applies the ServiceAccount, Roles, ClusterRoles and bindings it renders, and returns
// a token-authenticated config for the ServiceAccount (TokenRequest API) with the arguments of the Deployment
// (or, with sharding.enabled, of the StatefulSet). An operator started with it (see ChartInstall.Options) has
// exactly the access and settings the chart gives.
func (e *Env) ChartIdentity(t testing.TB, args ...string) ChartInstall {
	t.Helper()
	const release, namespace = "celaudit", "celaudit-system"
	ctx := context.Background()
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	objs := RenderChart(t, release, namespace, args...)
	var inst ChartInstall
	for _, o := range objs {
		var pod corev1.PodTemplateSpec
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatalf("converting the rendered Deployment: %v", err)
			}
			pod = d.Spec.Template
		case "StatefulSet": // sharding.enabled
			var s appsv1.StatefulSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &s); err != nil {
				t.Fatalf("converting the rendered StatefulSet: %v", err)
			}
			pod = s.Spec.Template
		default:
			continue
		}
		inst.Args = pod.Spec.Containers[0].Args
	}
	if inst.Args == nil {
		t.Fatal("the chart renders no Deployment or StatefulSet with arguments")
	}
	id, err := e.applyIdentity(ctx, objs, "the chart")
	if err != nil {
		t.Fatal(err)
	}
	inst.Identity = id
	return inst
}

// Options parses the chart's arguments with the operator's own flags, as its binary does, and adapts them to
// an operator run in the test process: no metrics or probe listeners, several managers in one process, short
// report coalescing and readiness intervals, and, when leader election is on, the lease in the release
// namespace, which is the pod's namespace in a cluster.
func (c ChartInstall) Options(t testing.TB) controllers.Options {
	t.Helper()
	o, err := ParseArgs(c.Args)
	if err != nil {
		t.Fatal(err)
	}
	test := TestOptions()
	o.MetricsAddr, o.ProbeAddr = test.MetricsAddr, test.ProbeAddr
	o.SkipControllerChecks = test.SkipControllerChecks
	o.ReportCoalesce, o.ReadinessInterval = test.ReportCoalesce, test.ReadinessInterval
	if o.LeaderElect && o.LeaderElectionNS == "" {
		o.LeaderElectionNS = c.Namespace
	}
	return o
}

// ParseArgs parses the operator's command-line arguments as main does: its options' flags and the logger's
// (--zap-log-level and the like, parsed and not used).
func ParseArgs(args []string) (controllers.Options, error) {
	o := controllers.DefaultOptions()
	fs := flag.NewFlagSet("celaudit", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	o.BindFlags(fs)
	var zapOpts zap.Options
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("parsing the operator's arguments %q: %w", args, err)
	}
	if fs.NArg() > 0 {
		return o, errors.New("the operator takes no positional arguments: " + strings.Join(fs.Args(), " "))
	}
	return o, nil
}
