#!/usr/bin/env bash
# Builds the Helm CLI the chart tests run, from its Go module (pinned), once per machine.
# helm is not a dependency of celaudit's go.mod: it is built outside the module.
#
# Usage: hack/setup-helm.sh            prints the path of the helm binary
# Env:   CELAUDIT_CACHE   cache root (default ~/.cache/celaudit)
#        HELM_VERSION     helm.sh/helm/v3 version (default v3.22.0)
#
# The first build takes a few minutes; later runs return at once.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
CACHE=${CELAUDIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/celaudit}
BIN_DIR="$CACHE/bin"
HELM="$BIN_DIR/helm-$HELM_VERSION"

if [[ -x "$HELM" ]]; then
  echo "$HELM"
  exit 0
fi

log() { printf '[setup-helm] %s\n' "$*" >&2; }

mkdir -p "$BIN_DIR"
tmp=$(mktemp -d "$BIN_DIR/.helm-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Outside any module, with no -mod flags from the caller's GOFLAGS.
export GOFLAGS= GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0
# As helm's Makefile does: the Kubernetes version that `helm template` and `helm lint` assume (without a
# cluster) is the one of the client-go helm is built with, client-go v0.X.Y meaning Kubernetes v1.X.
gomod=$(cd "$tmp" && go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
k8s_minor=$(sed -n 's#^\s*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod" | head -1)
[[ -n "$k8s_minor" ]] || { log "no k8s.io/client-go version in $gomod"; exit 1; }
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done
log "building helm $HELM_VERSION; the first build takes a few minutes"
start=$SECONDS
(cd "$tmp" && GOBIN="$tmp" go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
"$tmp/helm" version --short >/dev/null
mv "$tmp/helm" "$HELM"
log "built helm in $((SECONDS - start))s"
echo "$HELM"
