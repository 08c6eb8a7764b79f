package cli

import (
	"encoding/json"
	"strconv"

	"github.com/celaudit/celaudit/internal/admit"
	"github.com/celaudit/celaudit/internal/audit"
)

// limitsKey is the policy key of the results of the API server's limits on the size of a request: an object
// it refuses for its size is refused before any validation or policy judges it, so that is its only result.
var limitsKey = audit.PolicyKey{Source: audit.SourceAPIServer, Name: "request-size"}

// Rules of the results of limitsKey.
const (
	// ruleRequestBody: the JSON body kubectl sends to create the object is over the API server's limit (see
	// admit.RequestTooLarge).
	ruleRequestBody = "request body"
	// ruleData: the data of a ConfigMap or Secret add up to more than admit.MaxDataBytes.
	ruleData = "data"
)

// propBytes is the property of a result of limitsKey holding the size the limit applies to.
const propBytes = "bytes"

// sizeResult is the fail result of an object the API server refuses for its size, with its message.
func sizeResult(ref audit.ObjectRef, rule, message string, size int) audit.Result {
	return audit.Result{
		Policy:     limitsKey.Name,
		Rule:       rule,
		Category:   "API server limits",
		Severity:   audit.SeverityHigh,
		Verdict:    audit.Fail,
		Message:    message,
		Properties: map[string]string{propBytes: strconv.Itoa(size)},
		Resource:   ref,
	}
}

// requestTooLarge returns the result of a record whose body the API server refuses for its size, nil when it
// does not. Only the object's identity is decoded: the API server refuses it unread.
func requestTooLarge(rs *ruleSet, opts evalOptions, r record) *audit.Result {
	err := admit.RequestTooLarge(len(r.data))
	if err == nil {
		return nil
	}
	var head struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(r.data, &head) // what does not decode is named as far as it does
	ref := audit.ObjectRef{APIVersion: r.kind.GroupVersion().String(), Kind: r.kind.Kind, Namespace: head.Metadata.Namespace, Name: head.Metadata.Name}
	if res, rerr := rs.views.Resources.ResourceForKind(r.kind); rerr == nil {
		switch {
		case !res.Namespaced:
			ref.Namespace = ""
		case ref.Namespace == "":
			ref.Namespace = opts.namespace
		}
	}
	result := sizeResult(ref, ruleRequestBody, err.Error(), len(r.data))
	return &result
}

// policyKeys are the keys of the policies the check reports on: those of rs, and limitsKey when an object
// was refused for its size.
func (t *tally) policyKeys(rs *ruleSet) []audit.PolicyKey {
	var out []audit.PolicyKey
	if _, refused := t.byPolicy[limitsKey]; refused {
		out = append(out, limitsKey) // "apiserver" sorts before every other source
	}
	for _, p := range rs.policies {
		out = append(out, p.Key())
	}
	return out
}
