// Package manifests reads Kubernetes objects from manifest files as kubectl apply -f does: files,
// directories (walked in lexical order, *.yaml, *.yml and *.json), or "-" for standard input; multi-document
// YAML, JSON objects and JSON streams; v1 List objects expanded into their items.
//
// Every object comes with where it was read (file and line), and every error names the file and the line,
// so that a command can say exactly which input is wrong. Reading is streaming: a caller that visits
// objects one at a time holds one document at a time, whatever the size of the inputs.
package manifests
