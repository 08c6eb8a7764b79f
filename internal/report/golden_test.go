package report

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/internal/audit"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// serialize writes reports as a YAML stream, the way kubectl prints them.
func serialize(t *testing.T, r Reports) []byte {
	t.Helper()
	var buf bytes.Buffer
	write := func(obj any) {
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	for i := range r.ClusterPolicyReports {
		write(&r.ClusterPolicyReports[i])
	}
	for i := range r.PolicyReports {
		write(&r.PolicyReports[i])
	}
	return buf.Bytes()
}

func TestGoldenReports(t *testing.T) {
	known := newResult(withObject("team-a", "w1"))
	results := []audit.Result{
		known,
		newResult(withObject("team-a", "w2"), withVerdict(audit.Pass)),
		newResult(withObject("team-a", "w3"), withVerdict(audit.Error),
			withRule("spec.size"), withMessage("expression evaluation exceeded the cost budget"),
			withProperty(audit.PropFieldPath, "spec.size")),
		newResult(withObject("team-b", "w1"), withVerdict(audit.Skip),
			withRule("spec.replicas == oldSelf.spec.replicas"),
			withMessage("transition rule needs the previous version of the object")),
		newResult(withObject("", "default"), withKind("v1", "Namespace"),
			withPolicy("vap/require-team-label"), withRule("validations[0]"), withCategory("ValidatingAdmissionPolicy"),
			withSeverity(audit.SeverityHigh), withVerdict(audit.Warn),
			withMessage(`label "team" is required`),
			withProperties(map[string]string{
				audit.PropBinding:           "require-team-label-binding",
				audit.PropValidationActions: "Warn",
			})),
	}
	previous := map[string]metav1.Timestamp{known.ID(): {Seconds: 1_767_225_600}}
	got := serialize(t, BuildCounted(results, nil, previous, scanTime(), Options{}))

	path := filepath.Join("testdata", "reports.golden.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/report -run TestGoldenReports -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("reports differ from %s (rerun with -update if the change is intended):\n%s", path, got)
	}
}
