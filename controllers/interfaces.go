package controllers

import (
	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/scan"
)

// PolicyRegistry receives compiled policies; the scan engine evaluates them on the objects they cover.
type PolicyRegistry interface {
	SetPolicy(p audit.Policy)
	ReplacePolicy(p audit.Policy)
	RemovePolicy(key string)
	Rescan(key, namespace string)
}

var _ PolicyRegistry = &scan.Engine{}
