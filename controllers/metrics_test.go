package controllers

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/celaudit/celaudit/internal/audit"
	"github.com/celaudit/celaudit/internal/results"
)

func TestResultCollector(t *testing.T) {
	store := results.NewStore(nil)
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	ref := func(uid string) audit.ObjectRef {
		return audit.ObjectRef{Namespace: "n", Name: uid, UID: ktypes.UID("u-" + uid)}
	}
	store.Set(audit.VAPKey("p"), results.ObjectKey{GVR: gvr, UID: "a"}, "n", []audit.Result{
		{Policy: "p", Verdict: audit.Pass, Resource: ref("a")},
		{Policy: "p", Verdict: audit.Pass, Resource: ref("a"), Properties: map[string]string{"binding": "b2"}},
	})
	store.Set(audit.VAPKey("p"), results.ObjectKey{GVR: gvr, UID: "b"}, "n", []audit.Result{
		{Policy: "p", Verdict: audit.Fail, Resource: ref("b")},
		{Policy: "p", Verdict: audit.Skip, Resource: ref("b")},
	})
	want := `
# HELP celaudit_audited_objects Objects that currently have results.
# TYPE celaudit_audited_objects gauge
celaudit_audited_objects 2
# HELP celaudit_results Current audit results by verdict.
# TYPE celaudit_results gauge
celaudit_results{result="error"} 0
celaudit_results{result="fail"} 1
celaudit_results{result="pass"} 2
celaudit_results{result="skip"} 1
celaudit_results{result="warn"} 0
`
	if err := testutil.CollectAndCompare(newResultCollector(store), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
