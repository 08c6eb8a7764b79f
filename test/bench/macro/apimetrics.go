package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"
)

// requests counts API requests by "VERB resource" (resource as group/resource[/subresource]; "" group for
// the core group; non-resource requests as their path class).
type requests map[string]float64

// apiMetrics reads the API server's own request counters from its /metrics endpoint.
type apiMetrics struct {
	client rest.Interface
}

var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// scrape returns apiserver_request_total minus apiserver_self_requests_total (the API server's requests to
// itself, over loopback), so that what is left are requests from clients: the operator and the harness.
func (m apiMetrics) scrape(ctx context.Context) (requests, error) {
	raw, err := m.client.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	out := requests{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var sign float64
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{"):
			sign = 1
		case strings.HasPrefix(line, "apiserver_self_requests_total{"):
			sign = -1
		default:
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		value, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, m := range labelRE.FindAllStringSubmatch(line[:end], -1) {
			labels[m[1]] = m[2]
		}
		out[requestKey(labels)] += sign * value
	}
	return out, sc.Err()
}

func requestKey(l map[string]string) string {
	r := l["resource"]
	if l["group"] != "" {
		r = l["group"] + "/" + r
	}
	if l["subresource"] != "" {
		r += "/" + l["subresource"]
	}
	if r == "" {
		r = "(non-resource)"
	}
	return l["verb"] + " " + r
}

// delta returns b - a, without zero entries.
func delta(a, b requests) requests {
	out := requests{}
	for k, v := range b {
		if d := v - a[k]; d > 0.5 || d < -0.5 {
			out[k] = d
		}
	}
	return out
}

// minus removes the harness's own known requests.
func (r requests) minus(own map[string]float64) requests {
	out := requests{}
	for k, v := range r {
		out[k] = v
	}
	for k, v := range own {
		out[k] -= v
		if out[k] < 0.5 && out[k] > -0.5 {
			delete(out, k)
		}
	}
	return out
}

// sum counts the requests whose verb is one of verbs and whose resource satisfies match (nil: any).
func (r requests) sum(verbs []string, match func(resource string) bool) int {
	n := 0.0
	for k, v := range r {
		verb, res, _ := strings.Cut(k, " ")
		for _, want := range verbs {
			if verb == want && (match == nil || match(res)) {
				n += v
			}
		}
	}
	return int(n + 0.5)
}

var writeVerbs = []string{"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"}

func isReport(res string) bool {
	for _, prefix := range []string{"wgpolicyk8s.io/policyreports", "wgpolicyk8s.io/clusterpolicyreports",
		"openreports.io/reports", "openreports.io/clusterreports"} {
		if strings.HasPrefix(res, prefix) {
			return true
		}
	}
	return false
}

func (r requests) keys() []string {
	out := make([]string, 0, len(r))
	for k := range r {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
