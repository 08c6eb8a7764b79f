// Package scan is the scanner: it reads the audited objects from the API server and feeds them to the compiled
// policies (evaluating them through package engine, the one evaluation path every front end shares).
//
// Each audited resource has one watcher: a paginated LIST evaluated page by page, then a WATCH with bookmarks
// from the list's resourceVersion. Objects are evaluated as they arrive and dropped; a watcher keeps only a
// digest per object (uid, namespace, resourceVersion), so memory stays flat as the cluster grows. A watch that
// expires (410 Gone) relists and re-evaluates only objects whose resourceVersion moved; objects that vanished
// meanwhile lose their results. A policy change rescans only that policy's resources, evaluating only the
// changed policy on objects that did not change. A withheld resource (Secrets, unless celaudit is asked to
// audit them) has no watcher at all: each policy covering it gets one skip result about the resource.
package scan
