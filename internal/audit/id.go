package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
)

// ID returns a deterministic identifier of the result: the same rule giving the same verdict and message
// on the same object always has the same ID, whatever the scan, so dashboards that key on it (Policy
// Reporter's resultID) see one continuing result rather than a new violation per scan.
func (r Result) ID() string {
	h := sha256.New()
	write := func(s string) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	write(string(r.Resource.UID))
	write(r.Resource.APIVersion)
	write(r.Resource.Kind)
	write(r.Resource.Namespace)
	write(r.Resource.Name)
	write(r.Policy)
	write(r.Rule)
	write(string(r.Verdict))
	write(r.Message)
	keys := make([]string, 0, len(r.Properties))
	for k := range r.Properties {
		if k != PropResultID {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		write(k)
		write(r.Properties[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
