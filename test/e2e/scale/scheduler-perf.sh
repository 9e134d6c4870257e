#!/usr/bin/env bash
# scheduler-perf.sh runs upstream's own DRA scheduler benchmark (k8s.io/kubernetes
# test/integration/scheduler_perf/dra, BenchmarkPerfScheduling, the incubating allocator) from the
# pinned k8s.io/kubernetes, so that the scale bench's figures have upstream's beside them: with
# PATCH set, also from the sources that patch makes (framework/binaries Set.Patched), the two
# interleaved REPEAT times.
#
# Run from test/e2e (make bench-e2e-scheduler-perf does). The test binaries are built into the
# e2e cache (go test -c: minutes the first time, seconds after) and run in their package's source
# directory, which holds performance-config.yaml; the cached etcd is put first on PATH, where
# the integration framework looks for it. Each run's data items (upstream's JSON) go to
# $OUT/<variant>-<run>/; the last lines are a table of SchedulingThroughput per run.
#
# Environment: WORKLOAD (default SchedulingWithResourceClaimTemplate/2000pods_200nodes: 200 nodes
# of 10 devices, half allocated, 1000 pods, the shape of the scale bench's upstream-basic at
# 200 nodes), PATCH (a patch file, empty for the pinned sources only), REPEAT (default 1),
# OUT (default a new directory under /tmp).
set -euo pipefail

workload=${WORKLOAD:-SchedulingWithResourceClaimTemplate/2000pods_200nodes}
patch=${PATCH:-}
repeat=${REPEAT:-1}
out=${OUT:-$(mktemp -d /tmp/gpudra-scheduler-perf.XXXXXX)}
pkg=k8s.io/kubernetes/test/integration/scheduler_perf/dra

bins=$(go run ./cmd/e2e-binaries | tail -n 1)
k8s=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)
variants=("pinned|$bins/scheduler-perf-dra.test|$k8s/test/integration/scheduler_perf/dra")
echo "scheduler_perf: building $pkg (pinned)"
go test -c -o "$bins/scheduler-perf-dra.test" "$pkg"
if [[ -n "$patch" ]]; then
	scheduler=$(go run ./cmd/e2e-binaries -patch "$patch" | sed -n 's/^patched kube-scheduler: //p')
	ws=$(dirname "$scheduler")
	name=$(basename "$patch" .patch)
	echo "scheduler_perf: building $pkg (+$name, $ws/go.work)"
	GOWORK="$ws/go.work" go test -c -o "$ws/scheduler-perf-dra.test" "$pkg"
	variants+=("+$name|$ws/scheduler-perf-dra.test|$ws/src/kubernetes/test/integration/scheduler_perf/dra")
fi

export PATH="$bins:$PATH"
rows=()
for r in $(seq 1 "$repeat"); do
	for v in "${variants[@]}"; do
		IFS='|' read -r label bin dir <<<"$v"
		items="$out/${label#+}-$r"
		echo "scheduler_perf: $workload, $label, run $r (load: $(cut -d' ' -f1-3 /proc/loadavg))"
		line=$(cd "$dir" && "$bin" -test.run '^$' -test.benchtime 1x -perf-scheduling-label-filter= \
			-test.bench "BenchmarkPerfScheduling\$/^${workload%%/*}\$/^${workload#*/}\$" \
			-data-items-dir "$items" 2>&1 | tee "$items.log" | grep '^BenchmarkPerfScheduling' || true)
		rate=$(grep -o '[0-9.]* SchedulingThroughput/Average' <<<"$line" | cut -d' ' -f1)
		rows+=("| $workload | $label | $r | ${rate:-failed: see $items.log} |")
	done
done
printf '\n| upstream scheduler_perf workload | kube-scheduler | run | SchedulingThroughput average, pods/s |\n|---|---|---|---|\n'
printf '%s\n' "${rows[@]}"
