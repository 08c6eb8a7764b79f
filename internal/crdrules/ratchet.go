package crdrules

import (
	"context"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/common"
)

// updateValidator is what the CRD strategy offers for an UPDATE: the checks other than CEL, with validation
// ratcheting (CRDValidationRatcheting is GA, so the strategy always ratchets).
type updateValidator interface {
	ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList
}

// UpdateErrors validates an UPDATE of an object from old to obj as the given version of the CRD would, and
// returns the field errors the apiserver would reject it with, each as field.Error.Error() prints it (the
// Message of a fail Finding). Validation ratcheting applies, as in the apiserver: an error of a field left
// unchanged by the update is dropped, except for transition rules (rules using oldSelf), which always run.
// With obj equal to old this is the no-op update of a storage version migration, or of a client that only
// touches other fields; an error of a Finding that is not returned is ratcheted on such an update.
//
// It returns an error, not field errors, when the version is not covered or its validation could not be
// built: there is then nothing the apiserver would have run.
func (p *Policy) UpdateErrors(ctx context.Context, version string, obj, old *unstructured.Unstructured) ([]string, error) {
	vp, ok := p.versions[version]
	if !ok {
		return nil, fmt.Errorf("version %s of %s has no validation", version, p.name)
	}
	if vp.buildErr != nil {
		return nil, fmt.Errorf("cannot validate version %s: %w", version, vp.buildErr)
	}
	if obj == nil || obj.Object == nil || old == nil || old.Object == nil {
		return nil, fmt.Errorf("cannot validate an update of an empty object")
	}
	return vp.updateErrors(ctx, obj, old)
}

// updateErrors runs the strategy's ValidateUpdate on the schema without rules, then the CEL rules with the
// same ratcheting options and budget, in the apiserver's order (customResourceStrategy.ValidateUpdate):
// blocking schema errors stop the rules from running.
func (vp *versionPolicy) updateErrors(ctx context.Context, obj, old *unstructured.Unstructured) (msgs []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			msgs, err = nil, fmt.Errorf("update validation panicked: %v", r)
		}
	}()
	strategy, ok := vp.schema.(updateValidator)
	if !ok {
		return nil, fmt.Errorf("the schema validation of version %s cannot validate updates", vp.version)
	}
	uNew := &unstructured.Unstructured{Object: forValidation(obj.Object)}
	uOld := &unstructured.Unstructured{Object: forValidation(old.Object)}
	errs := strategy.ValidateUpdate(ctx, uNew, uOld)
	if vp.cel != nil {
		if blocking, e := hasBlockingErr(errs); blocking {
			errs = append(errs, e)
		} else {
			correlated := common.NewCorrelatedObject(uNew.Object, uOld.Object, &model.Structural{Structural: vp.structural})
			celErrs, _ := vp.cel.Validate(ctx, nil, vp.structural, uNew.Object, uOld.Object, vp.budget, cel.WithRatcheting(correlated))
			errs = append(errs, celErrs...)
		}
	}
	seen := map[string]bool{}
	for _, e := range errs {
		if m := e.Error(); !seen[m] {
			seen[m] = true
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
}
