package admit

import (
	"k8s.io/apimachinery/pkg/runtime"
	admissionregistrationinstall "k8s.io/kubernetes/pkg/apis/admissionregistration/install"
	apiserverinternalinstall "k8s.io/kubernetes/pkg/apis/apiserverinternal/install"
	appsinstall "k8s.io/kubernetes/pkg/apis/apps/install"
	autoscalinginstall "k8s.io/kubernetes/pkg/apis/autoscaling/install"
	batchinstall "k8s.io/kubernetes/pkg/apis/batch/install"
	certificatesinstall "k8s.io/kubernetes/pkg/apis/certificates/install"
	coordinationinstall "k8s.io/kubernetes/pkg/apis/coordination/install"
	coreinstall "k8s.io/kubernetes/pkg/apis/core/install"
	discoveryinstall "k8s.io/kubernetes/pkg/apis/discovery/install"
	eventsinstall "k8s.io/kubernetes/pkg/apis/events/install"
	extensionsinstall "k8s.io/kubernetes/pkg/apis/extensions/install"
	flowcontrolinstall "k8s.io/kubernetes/pkg/apis/flowcontrol/install"
	networkinginstall "k8s.io/kubernetes/pkg/apis/networking/install"
	nodeinstall "k8s.io/kubernetes/pkg/apis/node/install"
	policyinstall "k8s.io/kubernetes/pkg/apis/policy/install"
	rbacinstall "k8s.io/kubernetes/pkg/apis/rbac/install"
	resourceinstall "k8s.io/kubernetes/pkg/apis/resource/install"
	schedulinginstall "k8s.io/kubernetes/pkg/apis/scheduling/install"
	storageinstall "k8s.io/kubernetes/pkg/apis/storage/install"
	storagemigrationinstall "k8s.io/kubernetes/pkg/apis/storagemigration/install"
)

// builtinScheme returns a scheme holding the types and defaulting functions of every group of stored
// built-in objects the kube-apiserver serves, registered as the kube-apiserver registers them (its
// legacyscheme is a process-wide global; this one belongs to its Preparer).
func builtinScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, install := range []func(*runtime.Scheme){
		admissionregistrationinstall.Install,
		apiserverinternalinstall.Install,
		appsinstall.Install,
		autoscalinginstall.Install,
		batchinstall.Install,
		certificatesinstall.Install,
		coordinationinstall.Install,
		coreinstall.Install,
		discoveryinstall.Install,
		eventsinstall.Install,
		extensionsinstall.Install,
		flowcontrolinstall.Install,
		networkinginstall.Install,
		nodeinstall.Install,
		policyinstall.Install,
		rbacinstall.Install,
		resourceinstall.Install,
		schedulinginstall.Install,
		storageinstall.Install,
		storagemigrationinstall.Install,
	} {
		install(s)
	}
	return s
}
