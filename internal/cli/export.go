package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/internal/auditpolicy"
	"github.com/celaudit/celaudit/internal/manifests"
	"github.com/celaudit/celaudit/internal/report"
)

func newExportCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Print the admission objects celaudit's policies stand for, to commit them elsewhere",
	}
	cmd.AddCommand(newExportAuditPolicyCommand(flags, streams))
	return cmd
}

// exportAuditPolicyLong is the help of export auditpolicy.
const exportAuditPolicyLong = `export auditpolicy prints, for each AuditPolicy named, the ValidatingAdmissionPolicy and
ValidatingAdmissionPolicyBinding that celaudit registers for it in Warn or Deny (named celaudit-NAME, with
the validationActions of its enforcement: [Audit] for an AuditPolicy still in Audit), ready to commit to a
GitOps repository in its place.

The pair carries the exemptions celaudit adds to every pair it registers: the binding leaves out the exempt
namespaces (a namespaceSelector) and resources (excludeResourceRules), and the policy the requests of the
exempt users and groups (the matchCondition audit.celaudit.io/exempt-identities). For an AuditPolicy read
from the cluster they are those its status shows, so that the pair printed is the pair registered. With -f
they are the built-in ones: celaudit's own namespace and identity, and the cluster's --exempt-* settings,
are then not known; export the AuditPolicy from the cluster to get them.

The exported pair is standalone: it has no owner reference and none of the labels by which celaudit
recognizes the pairs it manages, so celaudit audits it as any other ValidatingAdmissionPolicy once it is
applied. Delete the AuditPolicy when the pair is applied, or both are enforced.

AuditPolicies are read from the cluster, or with -f from manifest files (no cluster needed).`

// exportAuditPolicyOptions are the flags of export auditpolicy.
type exportAuditPolicyOptions struct {
	output string
	files  []string
}

func newExportAuditPolicyCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var o exportAuditPolicyOptions
	cmd := &cobra.Command{
		Use:     "auditpolicy NAME...",
		Aliases: []string{"auditpolicies", "ap"},
		Short:   "Print the ValidatingAdmissionPolicy and binding an AuditPolicy's enforcement creates",
		Long:    exportAuditPolicyLong,
		Example: `  kubectl celaudit export auditpolicy require-team-label > require-team-label.yaml
  kubectl celaudit export auditpolicy -f policies/ require-team-label -o json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			return o.run(cmd, flags, streams, names)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", OutputYAML, "Output format: yaml (documents separated by ---) or json (a v1 List).")
	cmd.Flags().StringSliceVarP(&o.files, "filename", "f", nil, "Read the AuditPolicies from these files or directories ('-' for stdin) instead of the cluster.")
	return cmd
}

// run prints the pairs of the AuditPolicies named, read from the cluster or from the files.
func (o exportAuditPolicyOptions) run(cmd *cobra.Command, flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, names []string) error {
	if o.output != OutputYAML && o.output != OutputJSON {
		return BadInput("unknown output format %q: want yaml or json", o.output)
	}
	var (
		aps []*v1alpha1.AuditPolicy
		err error
	)
	fromCluster := len(o.files) == 0
	if fromCluster {
		aps, err = auditPoliciesFromCluster(cmd, flags, names)
	} else {
		aps, err = auditPoliciesFromFiles(manifests.Reader{Stdin: streams.In}, o.files, names)
	}
	if err != nil {
		return err
	}
	var objs []runtime.Object
	for _, ap := range aps {
		// The zero value holds the built-in exemptions, all that a file tells.
		var ex auditpolicy.Exemptions
		if fromCluster {
			if ex, err = statusExemptions(ap); err != nil {
				return err
			}
		}
		pair := standalone(ap, ex)
		objs = append(objs, pair.Policy, pair.Binding)
	}
	return printObjects(streams.Out, o.output, objs)
}

// standalone returns the pair ap's enforcement registers, with the exemptions ex, without what ties it to ap
// or to celaudit's management: no owner reference, uid or generation, and none of the labels celaudit
// recognizes its own pairs by (a pair labelled as an AuditPolicy's is not audited as a policy of its own).
func standalone(ap *v1alpha1.AuditPolicy, ex auditpolicy.Exemptions) auditpolicy.Admission {
	a := auditpolicy.Owned(ap, ex)
	for _, m := range []*metav1.ObjectMeta{&a.Policy.ObjectMeta, &a.Binding.ObjectMeta} {
		m.UID, m.Generation, m.OwnerReferences = "", 0, nil
		delete(m.Labels, auditpolicy.LabelAuditPolicy)
		delete(m.Labels, report.ManagedByLabel)
		if len(m.Labels) == 0 {
			m.Labels = nil
		}
		if len(m.Annotations) == 0 {
			m.Annotations = nil
		}
	}
	return a
}

// statusExemptions returns the exemptions the AuditPolicies' status shows, which the pairs registered for
// them carry, with the built-in ones (a status not written yet shows none).
func statusExemptions(aps ...*v1alpha1.AuditPolicy) (auditpolicy.Exemptions, error) {
	var shown v1alpha1.Exemptions
	for _, ap := range aps {
		if e := ap.Status.Exemptions; e != nil {
			shown.Namespaces = append(shown.Namespaces, e.Namespaces...)
			shown.Resources = append(shown.Resources, e.Resources...)
			shown.Users = append(shown.Users, e.Users...)
			shown.Groups = append(shown.Groups, e.Groups...)
		}
	}
	ex, err := auditpolicy.NewExemptions(auditpolicy.Identity{}, shown)
	if err != nil {
		return ex, ClusterError("the exemptions in the status of the AuditPolicies: %w", err)
	}
	return ex, nil
}

func auditPoliciesFromCluster(cmd *cobra.Command, flags *genericclioptions.ConfigFlags, names []string) ([]*v1alpha1.AuditPolicy, error) {
	client, err := dynamicClient(flags)
	if err != nil {
		return nil, err
	}
	var out []*v1alpha1.AuditPolicy
	for _, name := range names {
		u, err := client.Resource(auditPoliciesGVR).Get(cmd.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, BadInput("auditpolicy %q not found", name)
		}
		if err != nil {
			return nil, ClusterError("reading auditpolicy %q: %w", name, err)
		}
		ap := &v1alpha1.AuditPolicy{}
		if err := convertInto(u, ap); err != nil {
			return nil, err
		}
		out = append(out, ap)
	}
	return out, nil
}

// auditPoliciesFromFiles returns the AuditPolicies named among the objects of files, in the order named.
func auditPoliciesFromFiles(r manifests.Reader, files, names []string) ([]*v1alpha1.AuditPolicy, error) {
	found := map[string]*v1alpha1.AuditPolicy{}
	err := r.Walk(files, func(o manifests.Object) error {
		if o.GroupVersionKind() != v1alpha1.GroupVersion.WithKind("AuditPolicy") || !slices.Contains(names, o.GetName()) {
			return nil
		}
		ap := &v1alpha1.AuditPolicy{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, ap, true); err != nil {
			return BadInput("%s: AuditPolicy %q: %w", o.Source, o.GetName(), err)
		}
		found[ap.Name] = ap
		return nil
	})
	if err != nil {
		if CodeOf(err) == ExitBadInput {
			return nil, err
		}
		return nil, BadInput("%w", err)
	}
	out := make([]*v1alpha1.AuditPolicy, 0, len(names))
	for _, name := range names {
		if found[name] == nil {
			return nil, BadInput("no AuditPolicy %q in %v", name, files)
		}
		out = append(out, found[name])
	}
	return out, nil
}

// printObjects prints objects as YAML documents separated by "---", or as a JSON v1 List.
func printObjects(w io.Writer, format string, objs []runtime.Object) error {
	if format == OutputJSON {
		list := &metav1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: []runtime.RawExtension{}}
		for _, o := range objs {
			list.Items = append(list.Items, runtime.RawExtension{Object: o})
		}
		return PrintList(w, OutputJSON, list)
	}
	var buf bytes.Buffer
	for i, o := range objs {
		data, err := json.Marshal(o)
		if err != nil {
			return fmt.Errorf("encoding %T: %w", o, err)
		}
		// Drop the empty creationTimestamp and status the typed objects serialize.
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return err
		}
		if meta, ok := m["metadata"].(map[string]any); ok {
			delete(meta, "creationTimestamp")
		}
		delete(m, "status")
		y, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(y)
	}
	_, err := w.Write(buf.Bytes())
	return err
}
