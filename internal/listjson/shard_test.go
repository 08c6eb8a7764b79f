package listjson

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ItemMeta reads of each item the namespace, name and UID client-go decodes, on both paths and for odd
// metadata (repeated, null, not strings) too.
func TestItemMetaMatchesClientGo(t *testing.T) {
	cases := map[string]string{
		"repeated metadata": `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[
			{"metadata":{"namespace":"first","name":"a","uid":"u"},"metadata":{"name":"b"}}]}`,
		"null metadata":      `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"metadata":null}]}`,
		"number namespace":   `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"metadata":{"namespace":7,"name":"n"}}]}`,
		"escaped namespace":  `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"metadata":{"namespace":"a\u0062","name":"x"}}]}`,
		"metadata after all": `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"data":{"metadata":{"namespace":"no"}},"metadata":{"namespace":"yes","uid":"1"}}]}`,
	}
	for name, body := range decodeListCases {
		cases[name] = body
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := clientGoList([]byte(body))
			if err != nil {
				t.Fatalf("client-go cannot decode the case: %v", err)
			}
			page, err := DecodePage([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			if page.Len() != len(want.Items) {
				t.Fatalf("%d items, client-go %d", page.Len(), len(want.Items))
			}
			for i := range want.Items {
				m, err := page.ItemMeta(i)
				if err != nil {
					t.Fatalf("item %d: %v", i, err)
				}
				w := &want.Items[i]
				if m.Namespace != w.GetNamespace() || m.Name != w.GetName() || m.UID != w.GetUID() {
					t.Fatalf("item %d: %q %q %q, client-go %q %q %q", i, m.Namespace, m.Name, m.UID,
						w.GetNamespace(), w.GetName(), w.GetUID())
				}
			}
		})
	}
}

// Keep drops items only: the list's resourceVersion, continue token, remainingItemCount and shardInfo stay
// as sent, also when no item is left, on both paths.
func TestKeepLeavesListMetadata(t *testing.T) {
	for name, body := range map[string]string{
		"one pass": `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"next-page","remainingItemCount":17,
			"shardInfo":{"selector":"s"}},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}},{"metadata":{"name":"c"}}]}`,
		"generic": `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"next-page","remainingItemCount":17,
			"shardInfo":{"selector":"s"}},"items":[{"metadata":{"name":"a"}},null,{"metadata":{"name":"c"}}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			for _, tc := range []struct {
				keep []bool
				want []string
			}{
				{[]bool{true, false, true}, []string{"a", "c"}},
				{[]bool{false, false, false}, nil},
			} {
				page, err := DecodePage([]byte(body))
				if err != nil {
					t.Fatal(err)
				}
				if page.Generic() != (name == "generic") {
					t.Fatalf("generic decoder used: %v", page.Generic())
				}
				wantMeta := map[string]interface{}{"resourceVersion": "42", "continue": "next-page", "remainingItemCount": int64(17),
					"shardInfo": map[string]interface{}{"selector": "s"}}
				if err := page.Keep(func(i int) (bool, error) { return tc.keep[i], nil }); err != nil {
					t.Fatal(err)
				}
				var names []string
				for i := range page.Len() {
					item, err := page.Item(i)
					if err != nil {
						t.Fatal(err)
					}
					names = append(names, item.GetName())
				}
				if !reflect.DeepEqual(names, tc.want) {
					t.Fatalf("kept %v, want %v", names, tc.want)
				}
				meta, _, _ := unstructured.NestedMap(page.List.Object, "metadata")
				if !reflect.DeepEqual(meta, wantMeta) {
					t.Fatalf("list metadata after Keep: %v, want %v", meta, wantMeta)
				}
				if page.ShardSelector() != "s" {
					t.Fatalf("shard selector %q", page.ShardSelector())
				}
			}
		})
	}
}
