// Package listjson decodes the JSON LIST pages of the API server in one pass, into exactly the unstructured
// lists client-go's generic decoder makes of them. Reading pages is, after evaluation, most of what an audit
// of stored objects costs.
package listjson
