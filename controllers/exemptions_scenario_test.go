package controllers_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/audit/v1alpha1"
	"github.com/celaudit/celaudit/controllers"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// everythingNeedsATeam returns the AuditPolicy of the lockout incident: every CREATE and UPDATE of every
// resource must carry a team label, denied.
func everythingNeedsATeam(name, message string) *v1alpha1.AuditPolicy {
	return &v1alpha1.AuditPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.AuditPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "has(object.metadata.labels) && 'team' in object.metadata.labels", Message: message,
			}},
			Enforcement: v1alpha1.Deny,
		},
	}
}

// dryRunCreate asks the API server to admit the creation of obj as the user of c, without storing it.
func dryRunCreate(c client.Client, obj client.Object) error {
	return c.Create(context.Background(), obj, client.DryRunAll)
}

// denied reports whether err is the rejection of a ValidatingAdmissionPolicy with message.
func denied(err error, message string) bool {
	return (apierrors.IsInvalid(err) || apierrors.IsForbidden(err)) && strings.Contains(err.Error(), message)
}

// impersonating returns a client of the test's admin acting as user in groups (system:masters among them,
// so that RBAC allows what admission then judges).
func impersonating(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:masters")}
	c, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// leaseRenewed returns the renew time of celaudit's leader election Lease in namespace ns.
func leaseRenewed(ctx context.Context, ns string) (time.Time, error) {
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "celaudit.celaudit.io"}, lease); err != nil {
		return time.Time{}, err
	}
	if lease.Spec.RenewTime == nil {
		return time.Time{}, fmt.Errorf("lease %s/%s has no renew time", ns, lease.Name)
	}
	return lease.Spec.RenewTime.Time, nil
}

// expectRefusedUntilOverride checks that the gate refuses to register the AuditPolicy named name once its audit
// found violations, that a write it would deny in namespace plain is then admitted, and that an explicit
// override registers it.
func expectRefusedUntilOverride(t *testing.T, name, plain string) {
	t.Helper()
	ctx := context.Background()
	expectAuditPolicy(t, name, func(ap *v1alpha1.AuditPolicy) error {
		safe := meta.FindStatusCondition(ap.Status.Conditions, v1alpha1.ConditionSafeToEnforce)
		enforced := meta.FindStatusCondition(ap.Status.Conditions, v1alpha1.ConditionEnforced)
		if safe == nil || safe.Status != metav1.ConditionFalse || safe.ObservedGeneration != ap.Generation {
			return fmt.Errorf("SafeToEnforce of generation %d is not False yet: %+v", ap.Generation, safe)
		}
		if enforced == nil || enforced.Status != metav1.ConditionFalse || enforced.Reason != controllers.ReasonNotSafeToEnforce {
			return fmt.Errorf("Enforced is not False/%s: %+v", controllers.ReasonNotSafeToEnforce, enforced)
		}
		return nil
	})
	expectRegistered(t, name, false)
	if err := dryRunCreate(env.Client, configMap(plain, "probe", nil)); err != nil {
		t.Fatalf("with the unsafe Deny refused, a ConfigMap without a team label was not admitted: %v", err)
	}

	// An explicit override registers it.
	overridden := &v1alpha1.AuditPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, overridden); err != nil {
		t.Fatal(err)
	}
	before := overridden.DeepCopy()
	overridden.Spec.EnforcementOverride = &v1alpha1.EnforcementOverride{Reason: "lockout drill"}
	if err := env.Client.Patch(ctx, overridden, client.MergeFrom(before)); err != nil {
		t.Fatalf("setting the override: %v", err)
	}
	expectRegistered(t, name, true)
}

// TestEnforceEverythingCannotLockOut is the lockout incident: an AuditPolicy denying every write of every
// resource that lacks a team label, set to Deny while celaudit runs as its shipped ServiceAccount. It is not
// registered while its own audit finds violations; registered by an explicit override, the pair denies what it
// should, yet celaudit keeps its leader Lease and writes its reports and
// status, the cluster's own namespaces, Leases and Events stay writable, the control plane's, the nodes' and
// celaudit's requests are not judged, and switching the AuditPolicy back to Audit works and removes the pair.
func TestEnforceEverythingCannotLockOut(t *testing.T) {
	ctx := context.Background()
	const (
		name  = "exempt-team"
		plain = "exempt-plain"
		msg   = "every object needs a team label"
	)
	create(t, namespace(plain), configMap(plain, "old", nil))
	deleteAfter(t, namespace(plain))
	deleteAuditPolicyAfter(t, name)

	id := env.ShippedIdentity(t)
	opts := auditPolicyOptions()
	opts.LeaderElect, opts.LeaderElectionNS = true, id.Namespace
	requests := &envtestutil.RequestCounter{}
	op, _ := envtestutil.StartOperator(t, requests.Wrap(id.Config), opts)
	envtestutil.WaitSettled(t, op)

	// Set to Deny by hand while stored objects violate it: the gate refuses to register it until an override.
	create(t, everythingNeedsATeam(name, msg))
	expectRefusedUntilOverride(t, name, plain)

	// The pair is in force: a ConfigMap without the label, in a namespace of no importance, is denied.
	envtestutil.Eventually(t, 20*time.Second, func() error {
		if err := dryRunCreate(env.Client, configMap(plain, "probe", nil)); !denied(err, msg) {
			return fmt.Errorf("creating a ConfigMap without a team label in %s: %w, want denied with %q", plain, err, msg)
		}
		return nil
	})

	// celaudit stays leader: its Lease is renewed after the policy took effect.
	since := time.Now()
	envtestutil.Eventually(t, 30*time.Second, func() error {
		renewed, err := leaseRenewed(ctx, id.Namespace)
		if err != nil {
			return err
		}
		if !renewed.After(since) {
			return fmt.Errorf("celaudit's Lease last renewed at %s, not since the policy took effect at %s", renewed, since)
		}
		return nil
	})

	// It writes its reports (the violation now fails: Deny) and the AuditPolicy's status, which shows the
	// exemptions in force.
	expectReport(t, plain, 0, "fail old: "+msg)
	ap := expectAuditPolicy(t, name, func(ap *v1alpha1.AuditPolicy) error {
		ex := ap.Status.Exemptions
		if ap.Status.ObservedGeneration != ap.Generation || ap.Status.LastAuditTime == nil || ex == nil {
			return fmt.Errorf("status of generation %d not written: %+v", ap.Generation, ap.Status)
		}
		if !slices.Contains(ex.Namespaces, id.Namespace) || !slices.Contains(ex.Namespaces, "kube-system") ||
			!slices.Contains(ex.Users, id.Username()) || !slices.Contains(ex.Resources, "coordination.k8s.io/leases") ||
			!slices.Contains(ex.Groups, "system:nodes") {
			return fmt.Errorf("status.exemptions lacks celaudit's identity or the built-in ones: %+v", ex)
		}
		return nil
	})
	passes := ap.Status.Pass
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: plain, Name: "labelled", Labels: map[string]string{"team": "a"}}})
	expectReport(t, plain, 1, "fail old: "+msg)
	expectAuditPolicy(t, name, func(ap *v1alpha1.AuditPolicy) error {
		if ap.Status.Pass <= passes {
			return fmt.Errorf("status not written since the labelled ConfigMap: %d passes (%d before)", ap.Status.Pass, passes)
		}
		return nil
	})

	// Reconciled again since, the registered pair was never rewritten: what celaudit wants, exemptions
	// included, is what the API server stored.
	for _, resource := range []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
		if n := requests.Get("update", resource) + requests.Get("patch", resource); n > 0 {
			t.Errorf("celaudit rewrote its %s %d times", resource, n)
		}
	}

	// The cluster's own namespaces and objects stay writable, as do celaudit's.
	for _, tc := range []struct {
		what string
		obj  client.Object
	}{
		{"a node's Lease in kube-node-lease", &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: "exempt-node-1"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("exempt-node-1"), LeaseDurationSeconds: ptr.To[int32](40)}}},
		{"a Lease anywhere", &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: plain, Name: "exempt-lock"}}},
		{"a ConfigMap in kube-system", configMap(metav1.NamespaceSystem, "exempt-probe", nil)},
		{"a ConfigMap in celaudit's namespace", configMap(id.Namespace, "exempt-probe", nil)},
		{"a core Event", &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: plain, Name: "exempt-event"},
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: plain, Name: "old"}, Reason: "Probe", Message: "m", Type: corev1.EventTypeNormal}},
		{"an events.k8s.io Event", &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: plain, Name: "exempt-event-v1"},
			EventTime: metav1.NewMicroTime(time.Now()), ReportingController: "test/probe", ReportingInstance: "probe", Action: "Probe",
			Reason: "Probe", Type: corev1.EventTypeNormal, Regarding: corev1.ObjectReference{Kind: "ConfigMap", Namespace: plain, Name: "old"}}},
	} {
		if err := dryRunCreate(env.Client, tc.obj); err != nil {
			t.Errorf("creating %s: %v", tc.what, err)
		}
	}
	// The Namespace objects of exempt namespaces are left out too; others are judged.
	for ns, wantDenied := range map[string]bool{metav1.NamespaceSystem: false, plain: true} {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"exempt-probe":"1"}}}`))
		err := env.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, patch, client.DryRunAll)
		if got := denied(err, msg); got != wantDenied || (!wantDenied && err != nil) {
			t.Errorf("updating Namespace %s: %v, want denied: %v", ns, err, wantDenied)
		}
	}

	// Requests of the control plane, the nodes and celaudit itself are not judged; anyone else's are.
	for _, tc := range []struct {
		user       string
		groups     []string
		wantDenied bool
	}{
		{user: "exempt-someone", wantDenied: true},
		{user: "system:kube-scheduler"},
		{user: "system:node:exempt-node-1", groups: []string{"system:nodes"}},
		{user: "exempt-kube-system-sa", groups: []string{"system:serviceaccounts:kube-system"}},
		{user: id.Username()},
	} {
		err := dryRunCreate(impersonating(t, tc.user, tc.groups...), configMap(plain, "probe", nil))
		if got := denied(err, msg); got != tc.wantDenied || (!tc.wantDenied && err != nil) {
			t.Errorf("creating a ConfigMap without a team label as %s %v: %v, want denied: %v", tc.user, tc.groups, err, tc.wantDenied)
		}
	}

	// The way back: `kubectl patch auditpolicy --type merge -p '{"spec":{"enforcement":"Audit"}}'` succeeds,
	// and celaudit removes the pair.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"enforcement":"Audit"}}`))
	if err := env.Client.Patch(ctx, &v1alpha1.AuditPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}, patch); err != nil {
		t.Fatalf("switching the AuditPolicy back to Audit: %v", err)
	}
	expectRegistered(t, name, false)
	expectAuditPolicy(t, name, func(ap *v1alpha1.AuditPolicy) error {
		if c := condition(ap, v1alpha1.ConditionEnforced); c.Reason != controllers.ReasonAuditOnly || c.ObservedGeneration != ap.Generation {
			return fmt.Errorf("Enforced = %+v", c)
		}
		return nil
	})
	envtestutil.Eventually(t, 20*time.Second, func() error {
		return dryRunCreate(env.Client, configMap(plain, "probe", nil))
	})
}

// roundTripperFunc is an http.RoundTripper of a function.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// celaudit does not start without knowing who it is, nor with an exemption it cannot read: either would leave
// a registered pair free to deny what it must not.
func TestExemptionsAtStart(t *testing.T) {
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/selfsubjectreviews") {
				return rt.RoundTrip(req)
			}
			body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"authentication is down","reason":"InternalError","code":500}`
			return &http.Response{StatusCode: http.StatusInternalServerError, Header: http.Header{"Content-Type": []string{"application/json"}},
				Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
		})
	})
	_, err := controllers.NewOperator(cfg, auditPolicyOptions())
	if err == nil || !strings.Contains(err.Error(), "SelfSubjectReview") || !strings.Contains(err.Error(), "authentication is down") {
		t.Errorf("start with the SelfSubjectReview failing: %v, want an error naming it and its cause", err)
	}

	opts := auditPolicyOptions()
	opts.ExemptResources = "/configmaps,deployments"
	_, err = controllers.NewOperator(env.Config, opts)
	if err == nil || !strings.Contains(err.Error(), `--exempt-resources: exempt resource "deployments": want group/resource`) {
		t.Errorf("start with a malformed --exempt-resources: %v, want an error naming the flag and the entry", err)
	}
}
