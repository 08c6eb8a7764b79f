package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AuditShardStatus is what one member of a sharded celaudit publishes for the leader: its place among the
// members and, per AuditPolicy, the counts of its last complete audit of the namespaces it owns. The leader
// adds up the AuditShards of the current epoch into each AuditPolicy's status.
type AuditShardStatus struct {
	// Index is the member's place among Count members: it owns the ranges j of the namespace hash
	// (KEP-5866) with j mod Count = Index.
	Index int32 `json:"index"`
	// Count is the number of members of the epoch.
	Count int32 `json:"count"`
	// Epoch is the generation of the membership the member belongs to: a reshard raises it, and the
	// leader only adds up AuditShards of the current one.
	Epoch int64 `json:"epoch"`
	// Ranges are the member's half-open ranges of the FNV-1a 64 hash of metadata.namespace, in increasing
	// order: the hash space is split into Count·Stripes equal ranges dealt out round-robin, so that
	// namespaces whose names differ only in their last characters (whose hashes lie close together) spread
	// over the members. The leader adds up a policy only when the ranges of the epoch's members cover the
	// space exactly once. They replace the rangeStart and rangeEnd of one contiguous range, which celaudit
	// no longer writes nor reads: a member that still publishes only those is not counted until it is
	// upgraded.
	// +listType=atomic
	// +optional
	Ranges []HashRange `json:"ranges,omitempty"`
	// Stripes is the number of ranges each member owns.
	// +optional
	Stripes int32 `json:"stripes,omitempty"`
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

// HashRange is a half-open range [start, end) of the 64-bit namespace hash, as written in a KEP-5866
// shardRange: 0x and 16 hexadecimal digits, and 0x10000000000000000 for the end of the last range.
type HashRange struct {
	// +kubebuilder:validation:Pattern=`^0x[0-9a-f]{16}$`
	Start string `json:"start"`
	// +kubebuilder:validation:Pattern=`^0x([0-9a-f]{16}|10000000000000000)$`
	End string `json:"end"`
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
// +kubebuilder:printcolumn:name="Stripes",type=integer,JSONPath=`.status.stripes`,description="Ranges of the namespace hash the member owns, dealt out round-robin",priority=1
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
