package audit

import (
	"context"
	"fmt"
	"runtime/debug"
)

// PanicHandler is told about each panic an evaluation recovered into an error result: the policy, the object
// and the panic's value and stack. Results carry only the value; the stack, which says where in celaudit or in
// the Kubernetes code it runs the panic happened, goes to whoever handles it (the operator logs it).
type PanicHandler func(policy PolicyKey, obj ObjectRef, value any, stack []byte)

type panicHandlerKey struct{}

// WithPanicHandler returns ctx carrying h: evaluations under ctx tell h about the panics they recover. The
// context carries it so that the code that recovers, deep in an evaluation, reaches the operator's logger
// without holding one.
func WithPanicHandler(ctx context.Context, h PanicHandler) context.Context {
	return context.WithValue(ctx, panicHandlerKey{}, h)
}

// Recovered tells the PanicHandler of ctx, if any, about value, a panic just recovered while policy evaluated
// obj. Call it from the deferred function that recovered, so that the stack still shows where the panic
// happened.
func Recovered(ctx context.Context, policy PolicyKey, obj ObjectRef, value any) {
	if h, ok := ctx.Value(panicHandlerKey{}).(PanicHandler); ok && h != nil {
		h(policy, obj, value, debug.Stack())
	}
}

// PanicMessage is the message of the error result of an evaluation that panicked with value.
func PanicMessage(value any) string {
	return fmt.Sprintf("internal error evaluating the policy: %v", value)
}
