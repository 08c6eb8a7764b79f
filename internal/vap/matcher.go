package vap

import (
	"fmt"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
)

// errNilSelector is the message of the apiserver's policy matcher (generic/policy_matcher.go).
const errNilSelector = "a nil %s selector was passed, please ensure selectors are initialized properly"

// selectorCachingMatcher is the apiserver's generic policy matcher, but parses each policy's and binding's
// label selectors once instead of on every request: the apiserver matches a request against each policy
// once, an audit matches every stored object against the same few. Matching itself is the apiserver's
// matching.Matcher.
type selectorCachingMatcher struct {
	generic.PolicyMatcher // GetNamespace and ValidateInitialization
	matcher               *matching.Matcher

	criteria sync.Map // *admissionregistrationv1.MatchResources -> *parsedCriteria
}

var _ generic.PolicyMatcher = &selectorCachingMatcher{}

func newSelectorCachingMatcher(m *matching.Matcher) *selectorCachingMatcher {
	return &selectorCachingMatcher{PolicyMatcher: generic.NewPolicyMatcher(m), matcher: m}
}

// DefinitionMatches is generic's DefinitionMatches.
func (c *selectorCachingMatcher) DefinitionMatches(a admission.Attributes, o admission.ObjectInterfaces, definition generic.PolicyAccessor) (bool, schema.GroupVersionResource, schema.GroupVersionKind, error) {
	constraints := definition.GetMatchConstraints()
	if constraints == nil {
		return false, schema.GroupVersionResource{}, schema.GroupVersionKind{}, fmt.Errorf("policy contained no match constraints, a required field")
	}
	if constraints.NamespaceSelector == nil {
		return false, schema.GroupVersionResource{}, schema.GroupVersionKind{}, fmt.Errorf(errNilSelector, "namespace")
	}
	if constraints.ObjectSelector == nil {
		return false, schema.GroupVersionResource{}, schema.GroupVersionKind{}, fmt.Errorf(errNilSelector, "object")
	}
	return c.matcher.Matches(a, o, c.criteriaOf(constraints))
}

// BindingMatches is generic's BindingMatches.
func (c *selectorCachingMatcher) BindingMatches(a admission.Attributes, o admission.ObjectInterfaces, binding generic.BindingAccessor) (bool, error) {
	matchResources := binding.GetMatchResources()
	if matchResources == nil {
		return true, nil
	}
	if matchResources.NamespaceSelector == nil {
		return false, fmt.Errorf(errNilSelector, "namespace")
	}
	if matchResources.ObjectSelector == nil {
		return false, fmt.Errorf(errNilSelector, "object")
	}
	isMatch, _, _, err := c.matcher.Matches(a, o, c.criteriaOf(matchResources))
	return isMatch, err
}

// criteriaOf returns the parsed criteria of constraints, which belong to a policy or binding this matcher's
// Policy holds and never changes.
func (c *selectorCachingMatcher) criteriaOf(constraints *admissionregistrationv1.MatchResources) *parsedCriteria {
	if v, ok := c.criteria.Load(constraints); ok {
		return v.(*parsedCriteria)
	}
	p := &parsedCriteria{constraints: constraints}
	p.namespace, p.namespaceErr = metav1.LabelSelectorAsSelector(constraints.NamespaceSelector)
	p.object, p.objectErr = metav1.LabelSelectorAsSelector(constraints.ObjectSelector)
	v, _ := c.criteria.LoadOrStore(constraints, p)
	return v.(*parsedCriteria)
}

// parsedCriteria is generic's matchCriteria with its selectors parsed.
type parsedCriteria struct {
	constraints  *admissionregistrationv1.MatchResources
	namespace    labels.Selector
	namespaceErr error
	object       labels.Selector
	objectErr    error
}

var _ matching.MatchCriteria = &parsedCriteria{}

func (p *parsedCriteria) GetParsedNamespaceSelector() (labels.Selector, error) {
	return p.namespace, p.namespaceErr
}

func (p *parsedCriteria) GetParsedObjectSelector() (labels.Selector, error) {
	return p.object, p.objectErr
}

func (p *parsedCriteria) GetMatchResources() admissionregistrationv1.MatchResources {
	return *p.constraints
}
