package audit

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ForbiddenRead is a read refused by the API server's authorization: of an audited resource, or of the params
// of a binding. Its message names what is missing in the terms of an RBAC rule (verbs, API group, resource) and
// how to grant it, ahead of the API server's own message, which names the user: whoever reads the error result
// or the Event can fix it without looking up what celaudit needs.
type ForbiddenRead struct {
	Resource schema.GroupResource
	// Role says what the resource is to the policy when it is not the audited one, e.g. "the resource of the
	// paramKind"; empty for an audited resource.
	Role string
	// Grant says how to grant the permission (the reader ClusterRole's aggregation label); may be empty.
	Grant string
	Err   error
}

func (e *ForbiddenRead) Error() string {
	group := fmt.Sprintf("API group %q", e.Resource.Group)
	if e.Resource.Group == "" {
		group = `the core API group ("")`
	}
	msg := fmt.Sprintf("forbidden: missing permission to list and watch %q in %s", e.Resource.Resource, group)
	if e.Role != "" {
		msg += ", " + e.Role
	}
	if e.Grant != "" {
		msg += "; " + e.Grant
	}
	return msg + " (" + e.Err.Error() + ")"
}

func (e *ForbiddenRead) Unwrap() error { return e.Err }
