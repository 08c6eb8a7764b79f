package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// EtcdBytes is what etcd stores: the reports' keys and values (the API server's encoding, what an etcd
// backup and every relist of them carry), and the database's size.
type EtcdBytes struct {
	ReportKeys  int
	ReportBytes int64
	// DBSize is etcd's database file size (with the history not yet compacted and free pages);
	// DBSizeInUse the part in use.
	DBSize, DBSizeInUse int64
}

// etcdBytes reads from the control plane's etcd the size of the reports of the run's report API.
func (cl *cluster) etcdBytes(ctx context.Context, reportAPI string) (EtcdBytes, error) {
	var out EtcdBytes
	ep := cl.env.ControlPlane.Etcd.URL
	if ep == nil {
		return out, fmt.Errorf("etcd has no client URL")
	}
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{ep.String()}, DialTimeout: 10 * time.Second})
	if err != nil {
		return out, fmt.Errorf("connecting to etcd: %w", err)
	}
	defer func() { _ = ec.Close() }()
	var gvrs []schema.GroupVersionResource
	switch reportAPI {
	case "openreports":
		gvrs = []schema.GroupVersionResource{openReportsGVR, clusterOpenReportsGVR}
	case "both":
		gvrs = []schema.GroupVersionResource{policyReportsGVR, clusterPolicyReportsGVR, openReportsGVR, clusterOpenReportsGVR}
	default:
		gvrs = []schema.GroupVersionResource{policyReportsGVR, clusterPolicyReportsGVR}
	}
	for _, gvr := range gvrs {
		// The API server stores a custom resource under /registry/<group>/<resource>/.
		prefix := fmt.Sprintf("/registry/%s/%s/", gvr.Group, gvr.Resource)
		resp, err := ec.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return out, fmt.Errorf("reading %s from etcd: %w", prefix, err)
		}
		for _, kv := range resp.Kvs {
			out.ReportKeys++
			out.ReportBytes += int64(len(kv.Key) + len(kv.Value))
		}
	}
	st, err := ec.Status(ctx, ep.String())
	if err != nil {
		return out, fmt.Errorf("etcd status: %w", err)
	}
	out.DBSize, out.DBSizeInUse = st.DbSize, st.DbSizeInUse
	return out, nil
}
