#!/usr/bin/env bash
# Builds the control-plane binaries the tests and the demo run against (kube-apiserver, etcd and kubectl)
# from Go modules, because their release downloads are not reachable from every build machine.
#
# Usage: hack/setup-envtest.sh            prints the directory that holds the binaries (KUBEBUILDER_ASSETS)
# Env:   CELAUDIT_CACHE   cache root (default ~/.cache/celaudit)
#        KUBE_VERSION     kube-apiserver and kubectl version (default v1.37.0)
#        ETCD_VERSION     etcd version (default v3.7.0)
#
# The first build takes several minutes and ~2.5 GB of memory; later runs return at once.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.0}
ETCD_VERSION=${ETCD_VERSION:-v3.7.0}
CACHE=${CELAUDIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/celaudit}
GOOS=$(go env GOOS)
GOARCH=$(go env GOARCH)
BIN_DIR="$CACHE/envtest/k8s/${KUBE_VERSION#v}-$GOOS-$GOARCH"
SCRATCH="$CACHE/envtest/build-${KUBE_VERSION}"

log() { printf '[setup-envtest] %s\n' "$*" >&2; }

if [[ -x "$BIN_DIR/kube-apiserver" && -x "$BIN_DIR/etcd" && -x "$BIN_DIR/kubectl" ]]; then
  echo "$BIN_DIR"
  exit 0
fi

mkdir -p "$BIN_DIR" "$SCRATCH"
cd "$SCRATCH"
export GOFLAGS=-mod=mod
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

# k8s.io/kubernetes points its staging modules at ./staging; replace each with its published release.
log "resolving k8s.io/kubernetes@$KUBE_VERSION"
gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
staging_version="v0.${KUBE_VERSION#v1.}"
if [[ ! -f go.mod ]]; then
  go mod init celaudit.local/envtest-build >/dev/null 2>&1
fi
replaces=()
while read -r mod; do
  replaces+=("-replace=$mod=$mod@$staging_version")
done < <(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod")
go mod edit "${replaces[@]}"
go mod edit -require="k8s.io/kubernetes@$KUBE_VERSION" -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"

cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
log "downloading modules"
go mod tidy >/dev/null 2>&1 || go mod tidy

major=${KUBE_VERSION#v}; major=${major%%.*}
minor=${KUBE_VERSION#v*.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build() { # name package ldflags
  if [[ -x "$BIN_DIR/$1" ]]; then return; fi
  log "building $1 ($2); the first build takes several minutes"
  local start=$SECONDS
  CGO_ENABLED=0 go build -trimpath -ldflags "$3" -o "$BIN_DIR/$1.tmp" "$2"
  mv "$BIN_DIR/$1.tmp" "$BIN_DIR/$1"
  log "built $1 in $((SECONDS - start))s"
}
build etcd go.etcd.io/etcd/server/v3 "-s -w"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags"
build kubectl k8s.io/kubernetes/cmd/kubectl "$ldflags"

echo "$BIN_DIR"
