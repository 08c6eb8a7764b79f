package listjson

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// decodeListCases are LIST bodies whose decoding must equal client-go's generic decoder's.
var decodeListCases = map[string]string{
	"built-in list, items without kind": `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"abc","remainingItemCount":7},
		"items":[{"metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"40"},"data":{"k":"v"}},
		         {"metadata":{"name":"b","namespace":"ns"},"binaryData":{"x":"AAEC"}}]}`,
	"custom resources with kind": `{"apiVersion":"example.com/v1","kind":"WidgetList","metadata":{"resourceVersion":"9"},
		"items":[{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"replicas":3}}]}`,
	"item with only kind keeps it": `{"apiVersion":"v1","kind":"PodList","metadata":{},"items":[{"kind":"Other","metadata":{"name":"p"}}]}`,
	"numbers": `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"spec":{
		"int":1,"neg":-17,"zero":0,"negzero":-0,"float":1.5,"integral float":2.0,"exp":1e3,"Exp":2E-2,
		"max":9223372036854775807,"overflow":9223372036854775808,"min":-9223372036854775808,
		"list":[1,2.5,-3,[4,[5.0]]]}}]}`,
	"strings": `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"data":{
		"escapes":"a\"b\\c\/d\b\f\n\r\t","unicode":"\u00e9\u4e2d\ud83d\ude00","lone surrogate":"\ud800x",
		"raw":"é中😀","empty":"","html":"<a href=\"x\">&amp;</a>"}}]}`,
	"invalid utf-8": "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMapList\",\"metadata\":{},\"items\":[{\"data\":{\"k\":\"a\xffb\xc3\"}}]}",
	"literals and nesting": `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"a":true,"b":false,"c":null,"d":{},"e":[],
		"f":[{"g":[{"h":null}]}],"dup":1,"dup":2}]}`,
	"whitespace":     " \n\t{ \"apiVersion\" : \"v1\" , \"kind\" : \"ConfigMapList\" , \"metadata\" : { } , \"items\" : [ { \"a\" : [ 1 , 2 ] } ] } \n",
	"null items":     `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{"resourceVersion":"1"},"items":null}`,
	"empty items":    `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{"resourceVersion":"1"},"items":[]}`,
	"null item":      `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[null,{"metadata":{"name":"x"}}]}`,
	"items first":    `{"items":[{"metadata":{"name":"x"}}],"metadata":{"continue":"c"},"kind":"SecretList","apiVersion":"v1"}`,
	"case-sensitive": `{"apiVersion":"v1","kind":"ConfigMapList","Metadata":{"continue":"no"},"Items":[{"x":1}],"metadata":{"continue":"yes"},"items":[{"y":2}]}`,
	"nested beyond the one-pass bound": `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"x"},"d":` +
		strings.Repeat("[", maxFastDepth) + strings.Repeat("]", maxFastDepth) + `},{"kind":"Other","n":1.5}]}`,
}

// slowPathCases are valid bodies the one-pass decoder hands to the generic one.
var slowPathCases = map[string]bool{"null item": true, "nested beyond the one-pass bound": true}

// clientGoList is the reference: what client-go's generic decoder, unstructured.UnstructuredJSONScheme, makes
// of a LIST body. It calls client-go directly and never the package's own fallback, so that a page DecodePage
// hands to its fallback is still compared with client-go rather than with itself.
func clientGoList(data []byte) (*unstructured.UnstructuredList, error) {
	obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, data)
	if err != nil {
		return nil, err
	}
	list, ok := obj.(*unstructured.UnstructuredList)
	if !ok {
		return nil, fmt.Errorf("the body is a single %T, not a list", obj)
	}
	return list, nil
}

// TestDecodeListMatchesClientGo compares what the operator reads of each page, DecodePage and every Item,
// with client-go's decoding, whichever path DecodePage takes; and checks that each case takes the path it
// is meant to, so that both paths are compared.
func TestDecodeListMatchesClientGo(t *testing.T) {
	for name, body := range decodeListCases {
		t.Run(name, func(t *testing.T) {
			want, err := clientGoList([]byte(body))
			if err != nil {
				t.Fatalf("client-go cannot decode the case: %v", err)
			}
			page, err := DecodePage([]byte(body))
			if err != nil {
				t.Fatalf("DecodePage: %v", err)
			}
			if page.Generic() != slowPathCases[name] {
				t.Fatalf("DecodePage: generic decoder used = %v, want %v", page.Generic(), slowPathCases[name])
			}
			got, err := decode([]byte(body))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if diff := compareLists(got, want); diff != "" {
				t.Fatalf("decode: %s", diff)
			}
			// The one-pass decoder alone, without Item's per-item fallback.
			fast, err := decodeListFast([]byte(body))
			if slowPathCases[name] {
				if !errors.Is(err, errSlowPath) {
					t.Fatalf("decodeListFast: %v, want errSlowPath", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("decodeListFast: %v", err)
			}
			if diff := compareLists(fast, want); diff != "" {
				t.Fatalf("decodeListFast: %s", diff)
			}
		})
	}
}

// TestDecodeListFastPath checks that realistic pages, including escapes and deep nesting within the bound,
// are decoded without falling back.
func TestDecodeListFastPath(t *testing.T) {
	deep := strings.Repeat(`{"a":`, maxFastDepth-2) + "1" + strings.Repeat("}", maxFastDepth-2)
	for name, body := range map[string]string{
		"deployments": deploymentPage(3),
		"escaped key": `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"data":{"a\u0062":"x\ty"}}]}`,
		"deep":        `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[` + deep + `]}`,
	} {
		t.Run(name, func(t *testing.T) {
			want, err := clientGoList([]byte(body))
			if err != nil {
				t.Fatalf("client-go cannot decode the case: %v", err)
			}
			got, err := decodeListFast([]byte(body))
			if err != nil {
				t.Fatalf("decodeListFast: %v", err)
			}
			if page, err := DecodePage([]byte(body)); err != nil || page.Generic() {
				t.Fatalf("DecodePage: generic decoder used, error %v", err)
			}
			if diff := compareLists(got, want); diff != "" {
				t.Fatal(diff)
			}
		})
	}
}

// badBodies are bodies client-go rejects.
var badBodies = map[string]string{
	"truncated":           `{"apiVersion":"v1","kind":"ConfigMapList","items":[{"a":1}`,
	"item not an object":  `{"apiVersion":"v1","kind":"ConfigMapList","items":[1]}`,
	"items not a list":    `{"apiVersion":"v1","kind":"ConfigMapList","items":{}}`,
	"trailing garbage":    `{"apiVersion":"v1","kind":"ConfigMapList","items":[]} x`,
	"not json":            `<html>`,
	"number out of range": `{"apiVersion":"v1","kind":"ConfigMapList","items":[{"a":1e400}]}`,
	"no kind":             `{"apiVersion":"v1","items":[]}`,
	"bad apiVersion":      `{"apiVersion":"a/b/c","kind":"ConfigMapList","items":[]}`,
	"not a list":          `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`,
	"range in other key":  `{"apiVersion":"v1","kind":"ConfigMapList","other":{"a":1e400},"items":[]}`,
	"leading zero":        `{"apiVersion":"v1","kind":"ConfigMapList","items":[{"a":01}]}`,
	"bare fraction":       `{"apiVersion":"v1","kind":"ConfigMapList","items":[{"a":1.}]}`,
	"bare exponent":       `{"apiVersion":"v1","kind":"ConfigMapList","items":[{"a":1e}]}`,
	"plus sign":           `{"apiVersion":"v1","kind":"ConfigMapList","items":[{"a":+1}]}`,
	"control character":   "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMapList\",\"items\":[{\"a\":\"x\ny\"}]}",
	"bad escape":          `{"apiVersion":"v1","kind":"ConfigMapList","items":[{"a":"\x"}]}`,
	"trailing comma":      `{"apiVersion":"v1","kind":"ConfigMapList","items":[{"a":1,}]}`,
	"unquoted key":        `{"apiVersion":"v1","kind":"ConfigMapList","items":[{a:1}]}`,
	"bad literal":         `{"apiVersion":"v1","kind":"ConfigMapList","items":[{"a":nul}]}`,
	"too deep":            `{"apiVersion":"v1","kind":"ConfigMapList","items":[` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `]}`,
}

func TestDecodeListRejectsBadBodies(t *testing.T) {
	for name, body := range badBodies {
		t.Run(name, func(t *testing.T) {
			if _, err := clientGoList([]byte(body)); err == nil {
				t.Fatalf("client-go decodes the case: it is not a bad body")
			}
			if got, err := decode([]byte(body)); err == nil {
				t.Fatalf("decode accepted it: %v", got.Items)
			}
		})
	}
}

func FuzzDecodeList(f *testing.F) {
	for _, body := range decodeListCases {
		f.Add([]byte(body))
	}
	for _, body := range badBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// Every body, whichever path DecodePage takes, is compared with client-go itself.
		want, err := clientGoList(body)
		if err != nil {
			if got, err := decode(body); err == nil {
				t.Fatalf("client-go rejects %q, decode decodes it: %v", body, got.Items)
			}
			return
		}
		got, err := decode(body)
		if err != nil {
			t.Fatalf("client-go decodes %q, decode fails: %v", body, err)
		}
		if page, err := scanPage(body); err == nil {
			for i := range page.raw {
				if _, err := page.onePassItem(i); err != nil {
					t.Fatalf("%q: the scan accepts item %d, decoding it fails: %v", body, i, err)
				}
			}
		}
		if diff := compareLists(got, want); diff != "" {
			t.Fatalf("%q: %s", body, diff)
		}
	})
}

// decode reads a page and decodes every item, as the operator does item by item.
func decode(data []byte) (*unstructured.UnstructuredList, error) {
	page, err := DecodePage(data)
	if err != nil {
		return nil, err
	}
	return listOf(page, page.Item)
}

// decodeListFast decodes a page without any fallback: the scan and every item's one-pass decoding must
// succeed.
func decodeListFast(data []byte) (*unstructured.UnstructuredList, error) {
	page, err := scanPage(data)
	if err != nil {
		return nil, err
	}
	return listOf(page, page.onePassItem)
}

// listOf returns the page's list with every item, each decoded by item.
func listOf(page *Page, item func(int) (*unstructured.Unstructured, error)) (*unstructured.UnstructuredList, error) {
	list := page.List
	list.Items = make([]unstructured.Unstructured, page.Len())
	for i := range list.Items {
		u, err := item(i)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		list.Items[i] = *u
	}
	return list, nil
}

// compareLists compares what the engine reads of a page: the items, and the list's apiVersion, kind and
// metadata.
func compareLists(got, want *unstructured.UnstructuredList) string {
	var diffs []string
	if len(got.Items) != len(want.Items) {
		return fmt.Sprintf("%d items, want %d", len(got.Items), len(want.Items))
	}
	for i := range want.Items {
		if !reflect.DeepEqual(got.Items[i].Object, want.Items[i].Object) {
			diffs = append(diffs, fmt.Sprintf("item %d:\n got %#v\nwant %#v", i, got.Items[i].Object, want.Items[i].Object))
		}
	}
	for _, k := range []string{"apiVersion", "kind", "metadata"} {
		if !reflect.DeepEqual(got.Object[k], want.Object[k]) {
			diffs = append(diffs, fmt.Sprintf("list %s: got %#v, want %#v", k, got.Object[k], want.Object[k]))
		}
	}
	return strings.Join(diffs, "\n")
}

// deploymentPage is a LIST page of n Deployments as the API server sends it.
func deploymentPage(n int) string {
	var items []string
	for i := range n {
		items = append(items, fmt.Sprintf(`{"metadata":{"name":"d-%d","namespace":"ns-%d","uid":"6b1f6d0e-0000-4000-8000-%012d","resourceVersion":"%d",
			"generation":1,"creationTimestamp":"2026-11-22T08:00:00Z","labels":{"app":"d-%d","tier":"web"}},
			"spec":{"replicas":2,"selector":{"matchLabels":{"app":"d-%d"}},"template":{"metadata":{"labels":{"app":"d-%d"}},
			"spec":{"containers":[{"name":"app","image":"registry.example/app:1.%d","ports":[{"containerPort":8080,"protocol":"TCP"}],
			"resources":{"limits":{"cpu":"500m","memory":"256Mi"},"requests":{"cpu":"100m","memory":"128Mi"}},
			"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],
			"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","securityContext":{},"schedulerName":"default-scheduler"}},
			"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%%","maxSurge":"25%%"}},"revisionHistoryLimit":10,"progressDeadlineSeconds":600},
			"status":{}}`, i, i%100, i, 1000+i, i, i, i, i))
	}
	return `{"kind":"DeploymentList","apiVersion":"apps/v1","metadata":{"resourceVersion":"99999","continue":"x"},"items":[` +
		strings.Join(items, ",") + `]}`
}

// BenchmarkDecodeList decodes a page of 500 Deployments.
func BenchmarkDecodeList(b *testing.B) {
	body := []byte(deploymentPage(500))
	for _, dec := range []struct {
		name   string
		decode func([]byte) (*unstructured.UnstructuredList, error)
	}{{"client-go", clientGoList}, {"Decode", decode}} {
		b.Run(dec.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := dec.decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
