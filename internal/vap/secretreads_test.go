package vap

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/environment"
)

// newTestSecretReads builds the analysis as CompilePolicy does, over the admission environment with
// variables declared.
func newTestSecretReads(t *testing.T, variables []admissionregistrationv1.Variable, paramsAreSecrets bool) *secretReads {
	t.Helper()
	compiler, err := cel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	accessors := make([]cel.NamedExpressionAccessor, len(variables))
	for i, v := range variables {
		accessors[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	vars := cel.OptionalVariableDeclarations{HasParams: true, HasAuthorizer: true}
	compiler.CompileAndStoreVariables(accessors, vars, environment.StoredExpressions)
	env, err := compiler.Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	return newSecretReads(env, variables, paramsAreSecrets)
}

func TestSecretReads(t *testing.T) {
	variables := []admissionregistrationv1.Variable{
		{Name: "name", Expression: "object.metadata.name"},
		{Name: "password", Expression: "object.data.password"},
		{Name: "decoded", Expression: "string(variables.password)"}, // through another variable
		{Name: "applied", Expression: "object.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']"},
		{Name: "meta", Expression: "object.metadata"},
		{Name: "limit", Expression: "params.data.max"},
	}
	const none exposure = 0
	cases := []struct {
		name       string
		expression string
		// want is the answer when params are not Secrets, wantSecretParams when they are.
		want, wantSecretParams exposure
	}{
		// Harmless fields.
		{"name", "object.metadata.name == 'x'", none, none},
		{"type", "object.type == 'Opaque'", none, none},
		{"labels", "object.metadata.labels['app'] == 'web'", none, none},
		{"has labels", "has(object.metadata.labels)", none, none},
		{"optional select of a harmless field", "object.?type.orValue('') == ''", none, none},
		{"constant index of a harmless field", "object['type'] == 'Opaque'", none, none},
		{"managedFields name keys, not values", "object.metadata.managedFields.size() > 0", none, none},
		{"old object, harmless field", "oldObject.metadata.name == object.metadata.name", none, none},
		{"namespace annotations are not the Secret's", "namespaceObject.metadata.annotations['a'] == 'b'", none, none},
		{"no object at all", "'x'.matches('(')", none, none},
		{"harmless variable", "variables.name == 'x'", none, none},
		{"variable by constant index", "variables['name'] == 'x'", none, none},
		{"unparsable: never evaluated", "object.data.(", none, none},

		// Sensitive fields, every access form.
		{"data", "object.data.password == 'x'", readsObject, readsObject},
		{"stringData", "object.stringData.password == 'x'", readsObject, readsObject},
		{"old object data", "oldObject.data.password == 'x'", readsObject, readsObject},
		{"annotations", "object.metadata.annotations['k'] == 'v'", readsObject, readsObject},
		{"has data", "has(object.data)", readsObject, readsObject},
		{"has a data key", "has(object.data.password)", readsObject, readsObject},
		{"has annotations", "has(object.metadata.annotations)", readsObject, readsObject},
		{"in data", "'password' in object.data", readsObject, readsObject},
		{"optional select", "object.?data.password.orValue('') == ''", readsObject, readsObject},
		{"optional select of annotations", "object.metadata.?annotations.orValue({}).size() > 0", readsObject, readsObject},
		{"constant index", "object['data']['password'] == 'x'", readsObject, readsObject},
		{"optional index", "object[?'stringData'].hasValue()", readsObject, readsObject},
		{"constant index of annotations", "object.metadata['annotations'].size() > 0", readsObject, readsObject},
		{"root-scoped identifier", ".object.data.password == 'x'", readsObject, readsObject},
		{"the reproduction", "!has(object.data) || !('password' in object.data) || 'x'.matches('(' + string(object.data.password))", readsObject, readsObject},

		// The object, or its metadata, used whole.
		{"object compared", "object == oldObject", readsObject, readsObject},
		{"object passed to a function", "string(object) == ''", readsObject, readsObject},
		{"computed index", "object[object.type] == 'x'", readsObject, readsObject},
		{"computed index of metadata", "object.metadata[object.type] == 'x'", readsObject, readsObject},
		{"metadata passed whole", "size(object.metadata) > 0", readsObject, readsObject},
		{"comprehension over the object", "object.all(k, k != 'data')", readsObject, readsObject},
		{"comprehension over metadata", "object.metadata.exists(k, k == 'name')", readsObject, readsObject},
		{"comprehension over data", "object.data.exists(k, k == 'password')", readsObject, readsObject},
		{"bound to a name", "cel.bind(o, object, o.data.password == 'x')", readsObject, readsObject},
		{"in a list", "[object][0].data.password == 'x'", readsObject, readsObject},
		{"in a map", "{'o': object}.o.type == 'x'", readsObject, readsObject},

		// Through variables.
		{"sensitive variable", "variables.password == 'x'", readsObject, readsObject},
		{"transitively", "variables.decoded == 'x'", readsObject, readsObject},
		{"sensitive variable by constant index", "variables['applied'].size() > 0", readsObject, readsObject},
		{"sensitive variable, optional select", "variables.?applied.hasValue()", readsObject, readsObject},
		{"variable holding metadata", "variables.meta.name == 'x'", readsObject, readsObject},
		{"variables used whole", "variables[object.type] == 'x'", readsObject, readsObject | readsParams},

		// Params, sensitive only when they are Secrets.
		{"params data", "params.data.max == '1'", none, readsParams},
		{"params harmless field", "params.metadata.name == 'x'", none, none},
		{"params whole", "string(params) == ''", none, readsParams},
		{"params through a variable", "variables.limit == '1'", none, readsParams},
		{"both", "object.data.password == params.data.password", readsObject, readsObject | readsParams},
	}
	plain := newTestSecretReads(t, variables, false)
	secretParams := newTestSecretReads(t, variables, true)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := plain.of(c.expression); got != c.want {
				t.Errorf("of(%q) = %b, want %b", c.expression, got, c.want)
			}
			if got := secretParams.of(c.expression); got != c.wantSecretParams {
				t.Errorf("with Secret params, of(%q) = %b, want %b", c.expression, got, c.wantSecretParams)
			}
		})
	}
}

// Variables may refer to variables declared after them only by mistake (they do not compile), but the
// analysis must not depend on the order either way.
func TestSecretReadsVariableOrder(t *testing.T) {
	s := newTestSecretReads(t, []admissionregistrationv1.Variable{
		{Name: "first", Expression: "variables.second"},
		{Name: "second", Expression: "object.data"},
	}, false)
	if got := s.of("variables.first.size() > 0"); got != readsObject {
		t.Errorf("a variable reading a later sensitive variable reads %b, want %b", got, readsObject)
	}
}

// Without an environment nothing can be inspected: everything counts as a read.
func TestSecretReadsWithoutEnvironment(t *testing.T) {
	s := newSecretReads(nil, nil, true)
	if got := s.of("object.metadata.name == 'x'"); got != readsObject|readsParams {
		t.Errorf("of = %b, want everything", got)
	}
}
