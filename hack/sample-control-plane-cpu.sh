#!/usr/bin/env bash
# Prints, every INTERVAL seconds, the CPU seconds kube-apiserver and etcd of the local envtest control plane
# used since the previous line, so that a benchmark phase's control plane CPU can be split between the two.
#
# usage: hack/sample-control-plane-cpu.sh [INTERVAL]   (default 0.5; stops when the API server exits)
set -euo pipefail

interval="${1:-0.5}"
wait_for() {
  local pid=""
  until pid="$(pgrep -f "envtest/.*/$1" | head -1)" && [[ -n "$pid" ]]; do sleep 0.5; done
  echo "$pid"
}
apiserver="$(wait_for kube-apiserver)"
etcd="$(wait_for etcd)"
hz="$(getconf CLK_TCK)"
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

echo "# time apiserver-cpu-s etcd-cpu-s (per ${interval}s)"
prev_a="$(ticks "$apiserver")"
prev_e="$(ticks "$etcd")"
while kill -0 "$apiserver" 2>/dev/null; do
  sleep "$interval"
  a="$(ticks "$apiserver")"
  e="$(ticks "$etcd")"
  awk -v t="$(date +%H:%M:%S.%3N)" -v a=$((a - prev_a)) -v e=$((e - prev_e)) -v hz="$hz" \
    'BEGIN { printf "%s %.2f %.2f\n", t, a / hz, e / hz }'
  prev_a="$a"
  prev_e="$e"
done
