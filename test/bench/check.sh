#!/usr/bin/env bash
# Benchmarks `kubectl celaudit check` on the shared workload (../shared/workloads, see its README): for N
# objects, a baseline run whose only rule matches no object (reading, parsing and spooling), the full run
# (-o table, what CI runs) and a run with -o json --results all whose verdicts are compared with
# expected/verdicts.tsv, each under /usr/bin/time -v. Usage: test/bench/check.sh N [kyverno-compat] [outdir]
set -euo pipefail
n=${1:?usage: check.sh N [kyverno-compat=true|false] [outdir]}
compat=${2:-true}
out=${3:-/tmp/celaudit-check-bench}
repo=$(cd "$(dirname "$0")/../.." && pwd)
work="$out/n$n-compat-$compat"
mkdir -p "$out"
bin="$out/bin"
mkdir -p "$bin"
(cd "$repo" && go build -o "$bin/kubectl-celaudit" ./cmd/kubectl-celaudit && go build -o "$bin/checkverdicts" ./test/bench/checkverdicts)
gen=${GENWORKLOAD:-$repo/../shared/workloads/genworkload.go}
[ -d "$work/objects" ] || go run "$gen" -n "$n" -seed 1 -kyverno-compat="$compat" -out "$work" >/dev/null
cd "$work"
rules=(--rules policies/ --rules params/ --rules crds/ --rules namespaces.yaml)
measure() { # name, then the command
	local name=$1; shift
	local code=0
	/usr/bin/time -v "$@" >"$out/$name.out" 2>"$out/$name.time" || code=$?
	awk -v name="$name" -v code="$code" -F': ' '
		/User time/ {u=$2} /System time/ {s=$2} /Elapsed/ {w=$2} /Maximum resident/ {r=$2}
		END {printf "%-28s exit %s  wall %s  cpu %.2f s (user %s, sys %s)  peak RSS %.1f MiB\n", name, code, w, u+s, u, s, r/1024}' "$out/$name.time"
}
echo "n=$n kyverno-compat=$compat $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
du -sh objects/ | awk '{print "objects: " $1 " of YAML"}'
measure "n$n-$compat-baseline" "$bin/kubectl-celaudit" check -f objects/ --rules baseline/noop.yaml
measure "n$n-$compat-table" "$bin/kubectl-celaudit" check -f objects/ "${rules[@]}"
measure "n$n-$compat-json-all" "$bin/kubectl-celaudit" check -f objects/ "${rules[@]}" -o json --results all
"$bin/checkverdicts" -expected expected/verdicts.tsv <"$out/n$n-$compat-json-all.out" | tail -1
tail -1 "$out/n$n-$compat-table.out"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
