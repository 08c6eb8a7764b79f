package differential

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/cli"
)

// TestCheckSizeLimitsMatchAPIServer asks the API server to create (dry run) objects at and over its size
// limits, a request body of 3 MiB and a ConfigMap's or Secret's data of 1 MiB, and compares its answers
// with check's: the objects it refuses are exactly those check fails under apiserver/request-size, each with
// the API server's message (for a validation error, the field error of its "is invalid" message).
func TestCheckSizeLimitsMatchAPIServer(t *testing.T) {
	const ns = "default"
	fill := func(n int) string { return strings.Repeat("x", n) }
	configMap := func(name string, data map[string]string, binary map[string][]byte) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data, BinaryData: binary}
	}
	secret := func(name string, data map[string][]byte, stringData map[string]string) *corev1.Secret {
		return &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data, StringData: stringData}
	}
	objects := []client.Object{
		configMap("size-cm-at-limit", map[string]string{"a": fill(1 << 19), "b": fill(1 << 19)}, nil),
		configMap("size-cm-over", map[string]string{"a": fill(1 << 19)}, map[string][]byte{"b": []byte(fill(1<<19 + 1))}),
		secret("size-secret-over", map[string][]byte{"a": []byte(fill(1 << 20))}, map[string]string{"b": "x"}),
		secret("size-secret-replaced", map[string][]byte{"a": []byte(fill(1<<20 + 1))}, map[string]string{"a": "x"}),
		configMap("size-cm-body", map[string]string{"a": fill(3 << 20)}, nil),
	}

	var docs []string
	for _, o := range objects {
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	path := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	cli.Run(streams, []string{"check", "-f", path, "-o", "json", "--results", "all"})
	var list struct {
		Items []v1alpha2.PolicyReport `json:"items"`
	}
	if err := json.Unmarshal(out.Bytes(), &list); err != nil {
		t.Fatalf("check printed no report List: %v\n%s", err, errOut.String())
	}
	predicted := map[string]string{} // object name -> message of its size result
	for _, r := range list.Items {
		for _, res := range r.Results {
			if res.Policy == "request-size" {
				predicted[res.Resources[0].Name] = res.Message
			}
		}
	}

	refused := 0
	for _, o := range objects {
		err := env.Client.Create(t.Context(), o, client.DryRunAll)
		want, predictedRefusal := predicted[o.GetName()]
		var status *apierrors.StatusError
		switch {
		case err == nil:
			if predictedRefusal {
				t.Errorf("%s: check predicts %q, the API server accepts it", o.GetName(), want)
			}
		case !errors.As(err, &status):
			t.Fatalf("%s: %v", o.GetName(), err)
		case !predictedRefusal:
			t.Errorf("%s: check predicts no refusal, the API server answers %q", o.GetName(), err)
		default:
			refused++
			got := status.ErrStatus.Message
			if _, invalid, ok := strings.Cut(got, " is invalid: "); ok && apierrors.IsInvalid(err) {
				got = invalid
			}
			if got != want {
				t.Errorf("%s: check says %q, the API server %q", o.GetName(), want, status.ErrStatus.Message)
			}
		}
	}
	if refused != 3 {
		t.Errorf("the API server refused %d objects for their size, want 3 (the fixture no longer tests what it says)", refused)
	}
}
