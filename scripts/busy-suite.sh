#!/bin/sh
# The whole suite (`npm test`, as the README runs it) while other processes keep every core busy:
# RUNS runs (default 3), one spinner per core (`nproc`), each spinner bounded in time and killed
# by its PID at the end. Prints the load average around each run and "N/RUNS passed"; exits 0
# only when every run passed. Logs: $OUT (default /tmp/busy-suite), one file per run.
#   sh scripts/busy-suite.sh            # 3 runs
#   RUNS=1 sh scripts/busy-suite.sh -- test/stream.test.ts   # arguments after -- go to tap
set -eu
RUNS=${RUNS:-3}
OUT=${OUT:-/tmp/busy-suite}
# A spinner never outlives this: a suite that hangs still leaves the machine alone eventually.
SPIN_SECONDS=${SPIN_SECONDS:-1800}
[ "${1:-}" = "--" ] && shift
mkdir -p "$OUT"
cd "$(dirname "$0")/.."

spinners=""
stop_spinners() {
  for pid in $spinners; do kill "$pid" 2>/dev/null || true; done
  for pid in $spinners; do wait "$pid" 2>/dev/null || true; done
  spinners=""
}
trap stop_spinners EXIT INT TERM

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

passed=0
cpus=$(nproc)
run=1
while [ "$run" -le "$RUNS" ]; do
  for _ in $(seq "$cpus"); do
    node -e "const end = Date.now() + ${SPIN_SECONDS} * 1000; let x = 0; while (Date.now() < end) x = (x + 1) % 1e9" &
    spinners="$spinners $!"
  done
  log="$OUT/run-$run.log"
  echo "busy-suite: run $run/$RUNS with $cpus spinners; load before: $(loadavg)"
  started=$(date +%s)
  if npm test -- "$@" >"$log" 2>&1; then
    passed=$((passed + 1))
    verdict=passed
  else
    verdict="FAILED (see $log)"
  fi
  echo "busy-suite: run $run $verdict in $(( $(date +%s) - started )) s; load after: $(loadavg)"
  grep -E '^# \{ total' "$log" | tail -1 || true
  stop_spinners
  run=$((run + 1))
done
echo "busy-suite: $passed/$RUNS passed"
[ "$passed" -eq "$RUNS" ]
