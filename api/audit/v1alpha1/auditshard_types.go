package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AuditShardStatus is what one member of a sharded celaudit publishes for the leader: its place among the
// members and, per AuditPolicy, the counts of its last complete audit of the namespaces it owns. The leader
// adds up the AuditShards of the current epoch into each AuditPolicy's status.
type AuditShardStatus struct {
	// Index is the member's range among Count equal contiguous ranges of the namespace hash (KEP-5866).
	Index int32 `json:"index"`
	// Count is the number of members of the epoch.
	Count int32 `json:"count"`
	// Epoch is the generation of the membership the member belongs to: a reshard raises it, and the
	// leader only adds up AuditShards of the current one.
	Epoch int64 `json:"epoch"`
	// RangeStart and RangeEnd bound the member's half-open range of the FNV-1a 64 hash of
	// metadata.namespace, in hexadecimal with a 0x prefix; the last range ends at 0x10000000000000000.
	RangeStart string `json:"rangeStart"`
	RangeEnd   string `json:"rangeEnd"`
	// CompletePolicies is the number of AuditPolicies whose current generation the member has completed an
	// audit of, as far as it knows.
	// +optional
	CompletePolicies int32 `json:"completePolicies"`
	// Policies are the AuditPolicies the member completed an audit of, by name.
	// +listType=map
	// +listMapKey=name
	// +optional
	Policies []AuditShardPolicy `json:"policies,omitempty"`
}

// AuditShardPolicy is one member's last complete audit of one AuditPolicy, over the namespaces it owns.
type AuditShardPolicy struct {
	// Name is the AuditPolicy's name.
	Name string `json:"name"`
	// Generation is the AuditPolicy's generation the audit covered.
	Generation int64 `json:"generation"`
	// AuditTime is when the audit's counts were taken.
	AuditTime metav1.Time `json:"auditTime"`
	// Matched, Judged and Violating count objects: with at least one result, with one other than a skip,
	// with a fail or warn result.
	Matched   int64 `json:"matched"`
	Judged    int64 `json:"judged"`
	Violating int64 `json:"violating"`
	// Pass, Fail, Warn, Error and Skip count results by verdict.
	Pass  int64 `json:"pass"`
	Fail  int64 `json:"fail"`
	Warn  int64 `json:"warn"`
	Error int64 `json:"error"`
	Skip  int64 `json:"skip"`
	// Resources counts results about a resource as a whole (it cannot be read, or is not audited), of
	// which ResourceErrors are errors.
	Resources      int64 `json:"resources"`
	ResourceErrors int64 `json:"resourceErrors"`
	// Configuration counts the error results of a policy or binding that fails to configure.
	Configuration int64 `json:"configuration"`
	// TopNamespaces are the (up to 10) namespaces of the member with most violations, most first. Each
	// namespace has one member, so the members' lists together hold the cluster's top 10.
	// +listType=atomic
	// +optional
	TopNamespaces []NamespaceViolations `json:"topNamespaces,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=auditshards,scope=Namespaced,categories=celaudit
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Index",type=integer,JSONPath=`.status.index`
// +kubebuilder:printcolumn:name="Count",type=integer,JSONPath=`.status.count`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`
// +kubebuilder:printcolumn:name="Complete",type=integer,JSONPath=`.status.completePolicies`,description="AuditPolicies whose current generation the member completed an audit of"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// AuditShard is one member of a sharded celaudit, as it tells the leader: its range of namespaces and its
// per-AuditPolicy counts. celaudit writes it (status only, and only when it changes) in its own namespace;
// it is not for users to edit.
type AuditShard struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Status AuditShardStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// AuditShardList contains a list of AuditShard.
type AuditShardList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AuditShard `json:"items"`
}
