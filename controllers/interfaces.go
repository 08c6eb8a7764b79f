package controllers

import (
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/scan"
)

// policyRegistry receives compiled policies; the scanner evaluates them on the objects they cover.
type policyRegistry interface {
	SetPolicy(p audit.Policy)
	ReplacePolicy(p audit.Policy)
	RemovePolicy(key audit.PolicyKey)
	Rescan(key audit.PolicyKey, namespace string)
}

var _ policyRegistry = &scan.Scanner{}

// EventRecorder records Events (events.k8s.io/v1) about objects: regarding is the object the Event is about,
// related an optional second one.
type EventRecorder interface {
	Eventf(regarding, related k8sruntime.Object, eventtype, reason, action, note string, args ...any)
}

var _ EventRecorder = recorder.EventRecorder(nil)
