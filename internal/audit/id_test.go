package audit

import "testing"

func TestResultID(t *testing.T) {
	base := func() Result {
		return Result{
			Policy:     "p",
			Rule:       "validations[0]",
			Verdict:    Fail,
			Message:    "too many replicas",
			Properties: map[string]string{PropBinding: "b", PropParam: "ns/limits"},
			Resource:   ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "n", Name: "d", UID: "u"},
		}
	}
	id := base().ID()
	if len(id) != 32 {
		t.Fatalf("ID %q: want 32 hex characters", id)
	}
	same := base()
	same.Properties = map[string]string{PropParam: "ns/limits", PropBinding: "b", PropResultID: "ignored"}
	if got := same.ID(); got != id {
		t.Errorf("ID depends on property order or on the resultID property: %s != %s", got, id)
	}
	changes := map[string]func(*Result){
		"uid":      func(r *Result) { r.Resource.UID = "v" },
		"name":     func(r *Result) { r.Resource.Name = "e" },
		"policy":   func(r *Result) { r.Policy = "q" },
		"rule":     func(r *Result) { r.Rule = "validations[1]" },
		"verdict":  func(r *Result) { r.Verdict = Warn },
		"message":  func(r *Result) { r.Message = "too few replicas" },
		"binding":  func(r *Result) { r.Properties[PropBinding] = "c" },
		"new prop": func(r *Result) { r.Properties[PropOperation] = "UPDATE" },
		// Separators keep adjacent fields apart: "ab"+"c" must differ from "a"+"bc".
		"boundary": func(r *Result) { r.Policy, r.Rule = "pv", "alidations[0]" },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			r := base()
			change(&r)
			if r.ID() == id {
				t.Errorf("changing the %s does not change the ID", name)
			}
		})
	}
}
