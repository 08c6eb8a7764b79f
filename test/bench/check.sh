#!/usr/bin/env bash
# Benchmarks `kubectl celaudit check` on the shared workload (../shared/workloads, see its README) by CPU time
# (user+sys), the measure that stays comparable on a shared machine, net of loading as the Kyverno anchor is:
#
#   baseline  check -f objects/ --rules baseline/noop.yaml   (its one policy matches no object: reading,
#             parsing and spooling the manifests, what the anchor calls loading)
#   table     check -f objects/ --rules policies/ ... (-o table, what CI runs), under a CPU profile
#             (test/bench/checkprofile) whose share of samples under vap.(*Policy).Evaluate, the upstream
#             evaluation, gives the floor of that run
#
# run REPEAT times each, interleaved (the machine's load changes the CPU time of one run to the next; medians
# of interleaved runs compare), then one -o json --results all run whose verdicts test/bench/checkverdicts
# compares with expected/verdicts.tsv.
#
# Usage: test/bench/check.sh N [kyverno-compat] [outdir]; REPEAT (default 5) runs of each.
set -euo pipefail
n=${1:?usage: check.sh N [kyverno-compat=true|false] [outdir]}
compat=${2:-true}
out=${3:-/tmp/celaudit-check-bench}
repeat=${REPEAT:-5}
repo=$(cd "$(dirname "$0")/../.." && pwd)
work="$out/n$n-compat-$compat"
bin="$out/bin"
mkdir -p "$bin"
(cd "$repo" && go build -o "$bin/kubectl-celaudit" ./cmd/kubectl-celaudit && go build -o "$bin/checkprofile" ./test/bench/checkprofile &&
	go build -o "$bin/checkverdicts" ./test/bench/checkverdicts)
gen=${GENWORKLOAD:-$repo/../shared/workloads/genworkload.go}
[ -d "$work/objects" ] || go run "$gen" -n "$n" -seed 1 -kyverno-compat="$compat" -out "$work" >/dev/null
cd "$work"
rules=(--rules policies/ --rules params/ --rules crds/ --rules namespaces.yaml)
# Pairs: the (policy, binding, object) lines of the workload, excluded ones included (the API server evaluates
# their matchConditions), as the anchor counts them.
pairs=$(($(wc -l <expected/verdicts.tsv) - 1))
# measure NAME CMD...: runs CMD under /usr/bin/time, prints one line and appends "NAME cpu" to $out/cpu.
measure() {
	local name=$1 load code=0
	shift
	load=$(cut -d' ' -f1 /proc/loadavg)
	/usr/bin/time -f '%U %S %e %M' -o "$out/$name.time" "$@" >"$out/$name.out" 2>"$out/$name.err" || code=$?
	tail -n 1 "$out/$name.time" | awk -v name="$name" -v code="$code" -v load="$load" '{
		printf "%-22s exit %s  load %5s  cpu %6.2f s (user %s, sys %s)  wall %6.2f s  peak RSS %6.1f MiB\n", name, code, load, $1+$2, $1, $2, $3, $4/1024
		printf "%s %.2f\n", name, $1+$2 >> "'"$out/cpu"'"
	}'
}
rm -f "$out/cpu"
echo "n=$n kyverno-compat=$compat pairs=$pairs, $(nproc) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
du -sh objects/ | awk '{print "objects: " $1 " of YAML"}'
for i in $(seq "$repeat"); do
	measure "baseline-$i" "$bin/kubectl-celaudit" check -f objects/ --rules baseline/noop.yaml
	measure "table-$i" "$bin/checkprofile" -cpuprofile "$out/table-$i.pprof" -- check -f objects/ "${rules[@]}"
	# The floor of the run: its CPU times the share of its samples under vap.(*Policy).Evaluate.
	(cd "$repo" && go tool pprof -top -cum "$out/table-$i.pprof" 2>/dev/null) |
		awk -v i="$i" '/internal\/vap\.\(\*Policy\)\.Evaluate$/ {sub("%", "", $5); print "share-" i, $5 / 100; exit}' >>"$out/cpu"
done
measure json-all "$bin/kubectl-celaudit" check -f objects/ "${rules[@]}" -o json --results all
"$bin/checkverdicts" -expected expected/verdicts.tsv <"$out/json-all.out" | tail -n 1
tail -n 1 "$out/table-1.out"
# Kyverno's CPU per pair net of loading (the workload's README), known at 10,000 and 100,000 objects.
case $n in 10000) kyverno=4.39 ;; 100000) kyverno=4.85 ;; *) kyverno=0 ;; esac
awk -v pairs="$pairs" -v kyverno="$kyverno" '
	function median(a, k,   i, j, t) {
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	/^baseline-/ { b[++nb] = $2 } /^table-/ { t[++nt] = $2 } /^share-/ { s[++ns] = $2 }
	END {
		for (i = 1; i <= nt; i++) f[i] = s[i] * t[i]
		mb = median(b, nb); mt = median(t, nt); mf = median(f, nt)
		net = (mt - mb) / pairs * 1e6
		printf "medians of %d runs: baseline %.2f s (%.2f-%.2f), table %.2f s (%.2f-%.2f), vap.(*Policy).Evaluate %.2f s (%.2f-%.2f)\n",
			nb, mb, b[1], b[nb], mt, t[1], t[nt], mf, f[1], f[nt]
		printf "CPU per pair net of loading: (%.2f - %.2f) s / %d = %.1f us", mt, mb, pairs, net
		if (kyverno > 0) printf "; Kyverno %.2f ms / %.1f us = %.0fx", kyverno, net, kyverno * 1000 / net
		printf "\n"
		printf "floor (vap.(*Policy).Evaluate): %.2f s / %d = %.1f us per pair; net of loading = %.2fx the floor\n", mf, pairs, mf / pairs * 1e6, (mt - mb) / mf
	}' "$out/cpu"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
