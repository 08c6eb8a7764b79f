package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/celaudit/celaudit/api/wgpolicyk8s/v1alpha2"
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/test/envtestutil"
)

// TestPodTemplateScenario audits workloads with a Pod policy annotated to expand pod templates: a
// Deployment whose template breaks the policy fails, reported on the Deployment with the property
// podTemplate, before any Pod exists (envtest runs no controllers); fixing the template passes it, and
// removing the annotation leaves the policy to Pods alone.
func TestPodTemplateScenario(t *testing.T) {
	ctx := context.Background()
	const ns = "ptpl-a"
	web := deployment(ns, "ptpl-web")
	web.Spec.Template.Spec.Containers[0].Image = "nginx:latest"
	create(t,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"ptpl-latest": "yes"}}},
		web,
		deployment(ns, "ptpl-api"),
	)
	_, _ = envtestutil.StartOperator(t, env.Config, envtestutil.TestOptions())

	const msg = "images must not use the latest tag"
	policy, binding := boundPolicy("ptpl-latest", "object.spec.containers.all(c, !c.image.endsWith(':latest'))", msg, coreRule("pods"),
		[]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		&admissionregistrationv1.MatchResources{NamespaceSelector: nsSelector("ptpl-latest")})
	policy.Annotations = map[string]string{audit.AnnotationExpandPodTemplates: "true"}
	create(t, policy, binding)
	deleteAfter(t, binding, policy)

	// One fail on the Deployment web, one pass for the template of api.
	expectReport(t, ns, 1, "fail ptpl-web: "+msg)
	stored := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(web), stored); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 10*time.Second, func() error {
		r, err := listedResult(ctx, ns, "ptpl-web")
		if err != nil {
			return err
		}
		got := r.Resources[0]
		if got.APIVersion != "apps/v1" || got.Kind != "Deployment" || got.UID != stored.UID {
			return fmt.Errorf("result is on %+v, want the Deployment %s", got, stored.UID)
		}
		if r.Properties[audit.PropPodTemplate] != "true" || r.Rule != "validations[0] (binding ptpl-latest, pod template)" || r.Policy != "ptpl-latest" {
			return fmt.Errorf("result %+v: want rule validations[0] (binding ptpl-latest, pod template) of ptpl-latest with podTemplate true", r)
		}
		return nil
	})

	// The template is evaluated when its workload changes: fixed, it passes; a CronJob's job template is
	// evaluated too.
	update(t, stored, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.27" })
	create(t, &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ptpl-nightly"},
		Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "job", Image: "busybox:latest"}},
			}},
		}}},
	})
	expectReport(t, ns, 2, "fail ptpl-nightly: "+msg)

	// Without the annotation the policy reads Pods only, of which there are none.
	update(t, policy, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
		delete(p.Annotations, audit.AnnotationExpandPodTemplates)
	})
	expectReport(t, ns, 0)
}

// listedResult returns the one result listed for the object named name in namespace ns.
func listedResult(ctx context.Context, ns, name string) (v1alpha2.PolicyReportResult, error) {
	items, _, err := celauditResults(ctx, ns)
	if err != nil {
		return v1alpha2.PolicyReportResult{}, err
	}
	var found []v1alpha2.PolicyReportResult
	for _, r := range items {
		if len(r.Resources) > 0 && r.Resources[0].Name == name {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		return v1alpha2.PolicyReportResult{}, fmt.Errorf("%d results listed for %s/%s, want 1", len(found), ns, name)
	}
	return found[0], nil
}
