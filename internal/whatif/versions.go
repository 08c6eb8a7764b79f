package whatif

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/celaudit/celaudit/internal/admit"
)

// crdRevision is a proposed CRD and the live one it replaces (nil for a new CRD): what decides in which
// versions the stored objects can be read once the proposal is applied.
type crdRevision struct {
	proposed, live *apiextensionsv1.CustomResourceDefinition
}

// convertFunc turns an object read in a version the cluster serves into the object the API server will
// serve in another version once the proposal is applied.
type convertFunc func(*unstructured.Unstructured) (*unstructured.Unstructured, error)

// readPlan is how Run reads the objects of one resource: by listing from, converting each object with convert
// (nil when from is the resource itself).
type readPlan struct {
	from    schema.GroupVersionResource
	convert convertFunc
}

// planReads decides how Run reads each resource of resources: as listed when the cluster serves it. A version
// that a proposed CRD serves but the cluster does not yet (a version the proposal adds, or starts serving) is
// read in a version the cluster serves and converted as the API server will convert it once the CRD is
// applied: with conversion None, upstream's converter, which changes only the apiVersion, then pruning by the
// new version's schema, as the API server prunes what it serves. A resource that cannot be read is left out,
// and notes say why when it holds stored objects, and which versions holding stored objects the proposal
// stops serving.
func planReads(pairs []*Pair, resources []schema.GroupVersionResource, served func(schema.GroupVersionResource) bool) (map[schema.GroupVersionResource]readPlan, []string) {
	reads := map[schema.GroupVersionResource]readPlan{}
	var notes []string
	for _, gvr := range resources {
		if served(gvr) {
			reads[gvr] = readPlan{from: gvr}
		}
	}
	for _, p := range pairs {
		if p.crd.proposed == nil {
			continue
		}
		notes = append(notes, p.crd.stoppedVersions()...)
		for _, gvr := range resources {
			if _, ok := reads[gvr]; ok || !p.crd.serves(gvr) {
				continue
			}
			r, note := p.crd.readThrough(gvr, served)
			if note != "" {
				notes = append(notes, note)
			}
			if r != nil {
				reads[gvr] = *r
			}
		}
	}
	return reads, notes
}

// serves reports whether the proposed CRD serves gvr.
func (c crdRevision) serves(gvr schema.GroupVersionResource) bool {
	crd := c.proposed
	if gvr.Group != crd.Spec.Group || gvr.Resource != crd.Spec.Names.Plural {
		return false
	}
	return slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
		return v.Name == gvr.Version && v.Served
	})
}

// readThrough plans reading gvr, a version the proposed CRD serves and the cluster does not, through a
// version the cluster serves: the live storage version first, then the proposed versions in order. It
// returns nil when there is nothing to read (a new CRD has no stored objects) or the objects cannot be
// converted, with a note saying why for the latter.
func (c crdRevision) readThrough(gvr schema.GroupVersionResource, served func(schema.GroupVersionResource) bool) (*readPlan, string) {
	if c.live == nil {
		return nil, ""
	}
	var from schema.GroupVersionResource
	for _, v := range append([]string{storageVersion(c.live)}, versionNames(c.proposed)...) {
		candidate := schema.GroupVersionResource{Group: gvr.Group, Version: v, Resource: gvr.Resource}
		if v != "" && hasVersion(c.proposed, v) && served(candidate) {
			from = candidate
			break
		}
	}
	if from.Empty() {
		return nil, ""
	}
	if s := c.proposed.Spec.Conversion; s != nil && s.Strategy != apiextensionsv1.NoneConverter {
		return nil, fmt.Sprintf("CustomResourceDefinition %s: the stored objects were not evaluated in version %s, which the "+
			"proposal serves: the cluster does not serve it yet, and the CRD converts objects through a %s, which whatif does not call",
			c.proposed.Name, gvr.Version, strings.ToLower(string(s.Strategy)))
	}
	convert, err := newConversion(c.proposed, gvr.Version)
	if err != nil {
		return nil, fmt.Sprintf("CustomResourceDefinition %s: the stored objects were not evaluated in version %s: %v", c.proposed.Name, gvr.Version, err)
	}
	return &readPlan{from: from, convert: convert}, ""
}

// stoppedVersions says, for each version the live CRD's objects may be stored in (status.storedVersions)
// that the proposed CRD no longer serves, that the proposal stops serving it.
func (c crdRevision) stoppedVersions() []string {
	if c.live == nil {
		return nil
	}
	var served []string
	for _, v := range c.proposed.Spec.Versions {
		if v.Served {
			served = append(served, v.Name)
		}
	}
	var notes []string
	for _, v := range c.live.Status.StoredVersions {
		if slices.Contains(served, v) {
			continue
		}
		still := "it serves no version: the objects can no longer be read at all"
		if len(served) > 0 {
			still = "they are evaluated in the versions it still serves, " + strings.Join(served, ", ")
		}
		notes = append(notes, fmt.Sprintf("CustomResourceDefinition %s: the proposal stops serving version %s, which objects "+
			"are stored in (status.storedVersions %s): clients reading or writing %s/%s will get NotFound; %s",
			c.proposed.Name, v, strings.Join(c.live.Status.StoredVersions, ", "), c.proposed.Spec.Group, v, still))
	}
	return notes
}

// newConversion returns the conversion of objects of crd to version, as the API server serves them once crd
// is applied: upstream's converter for crd's strategy, then pruning and the removal of nulls the schema does
// not allow, by the schema of version (the API server's schemaCoercingConverter).
func newConversion(crd *apiextensionsv1.CustomResourceDefinition, version string) (convertFunc, error) {
	crd = crd.DeepCopy()
	if crd.Spec.Conversion == nil {
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	}
	factory, err := conversion.NewCRConverterFactory(nil, nil)
	if err != nil {
		return nil, fmt.Errorf("building the converter: %w", err)
	}
	converter, _, err := factory.NewConverter(crd)
	if err != nil {
		return nil, fmt.Errorf("building the converter: %w", err)
	}
	structural, err := structuralFor(crd, version)
	if err != nil {
		return nil, err
	}
	target := schema.GroupVersion{Group: crd.Spec.Group, Version: version}
	return func(obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		out, err := converter.ConvertToVersion(obj, target)
		if err != nil {
			return nil, fmt.Errorf("converting %s to %s: %w", objectName(obj), target, err)
		}
		u, ok := out.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("converting %s to %s: got a %T", objectName(obj), target, out)
		}
		if structural != nil {
			structuralpruning.Prune(u.Object, structural, true)
			structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, structural)
		}
		return u, nil
	}, nil
}

// structuralFor returns the structural schema of version of crd, nil when it has none.
func structuralFor(crd *apiextensionsv1.CustomResourceDefinition, version string) (*structuralschema.Structural, error) {
	val, err := apihelpers.GetSchemaForVersion(crd, version)
	if err != nil || val == nil || val.OpenAPIV3Schema == nil {
		return nil, err
	}
	s, err := admit.Structural(val)
	if err != nil {
		return nil, fmt.Errorf("version %s: %w", version, err)
	}
	return s, nil
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

func versionNames(crd *apiextensionsv1.CustomResourceDefinition) []string {
	out := make([]string, 0, len(crd.Spec.Versions))
	for _, v := range crd.Spec.Versions {
		out = append(out, v.Name)
	}
	return out
}

func hasVersion(crd *apiextensionsv1.CustomResourceDefinition, version string) bool {
	return slices.Contains(versionNames(crd), version)
}
