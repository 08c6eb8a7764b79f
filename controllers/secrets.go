package controllers

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/internal/vap"
)

// A verdict is one bit about the object it judges: a policy testing a guess of a Secret's value passes or
// fails as the guess is wrong or right, and whoever reads the result (in a report, an AuditPolicy's status,
// an Event, a metric) learns that bit. So celaudit reads Secrets only when asked to (--audit-secrets):
// without it, no Secret is listed or watched, as audited object or as param, and what celaudit says about a
// policy is the same whatever the Secrets hold.

// secretsOptIn says how to have Secrets read, in every message about what is not read without it.
const secretsOptIn = "--audit-secrets (chart value audit.secrets)"

// withheldResources returns the resources never read, and why: a policy covering one gets a skip result
// about the resource saying so.
func (o Options) withheldResources() map[schema.GroupVersionResource]string {
	if o.AuditSecrets {
		return nil
	}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	return map[schema.GroupVersionResource]string{secrets: "celaudit audits Secrets only with " + secretsOptIn}
}

// withheldParams returns the param kinds never read, and why: a binding whose paramRef would read them gets
// an error result saying so on every object it matches.
func (o Options) withheldParams() map[schema.GroupVersionKind]error {
	if o.AuditSecrets {
		return nil
	}
	secret := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	return map[schema.GroupVersionKind]error{
		secret: errors.New("the paramKind is v1 Secret, and celaudit reads Secrets only with " + secretsOptIn),
	}
}

// paramsNotRead records a ParamsNotRead Warning Event on policy (of kind, a ValidatingAdmissionPolicy or an
// AuditPolicy) whose params are of kind paramKind, when params of that kind are withheld and some binding of
// the policy has a paramRef, which would read them. The note says nothing of any param object, not even
// whether one exists.
func (w *warnings) paramsNotRead(policy client.Object, kind string, params vap.ParamWithholder, paramKind *schema.GroupVersionKind, paramRefs int) {
	if paramKind == nil || paramRefs == 0 {
		return
	}
	if why := params.ParamsWithheld(*paramKind); why != nil {
		w.warn(policy, kind, "", ReasonParamsNotRead, "Bind",
			fmt.Sprintf("Params are not read: %v. Every object a binding with a paramRef matches gets an error result instead of a verdict", why))
	}
}
