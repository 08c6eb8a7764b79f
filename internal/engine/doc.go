// Package engine is the one evaluation path of celaudit: every front end (the operator's continuous scan, a
// what-if run against a live cluster, an offline check of manifest files) compiles policy objects and
// evaluates objects with it, so all of them give the same verdicts and messages by construction.
//
// What a policy reads besides the object it judges (the served resources, namespaces, param objects) comes
// through Views, whose implementations differ per front end: informers in the operator, paginated reads of
// a live cluster, or objects loaded from files (package views). The engine itself holds no state, talks to no
// API server and never fails: problems become error results.
package engine
