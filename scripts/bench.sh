#!/usr/bin/env bash
# The benchmark suite (benchmarks/run.py): every twophase sink beside what a user would pick
# instead, in one run, with plots. Writes benchmarks/results.json and docs/benchmarks.md (plots in
# docs/benchmarks/); see docs/benchmarks.md.
#   scripts/bench.sh                   # everything (~30 min on 2 cores)
#   scripts/bench.sh --quick           # tiny sizes, 1 repetition (< 5 min), into build/bench-quick/
#   scripts/bench.sh --only NAME[,...] # kafka, postgres, mariadb, overhead, recovery, scaling
#   scripts/bench.sh --wait-quiet 45   # first wait up to 45 min for a 1-min load average < 1
#   scripts/bench.sh --out DIR         # results.json, benchmarks.md and plots into DIR
#   scripts/bench.sh realtime-paths [ARGS]  # how promptly rows reach Python in real-time mode
#                                      # (benchmarks/bench_realtime_paths.py; prints a table)
#   scripts/bench.sh realtime [ARGS]   # real-time mode against micro-batches: produce-to-visible
#                                      # latency and backlog throughput, PostgreSQL and Kafka
#                                      # (benchmarks/bench_realtime.py; prints markdown tables)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[[ -x .venv/bin/python ]] || bash scripts/setup.sh
if ! .venv/bin/python -c 'import matplotlib, twophase_dev' >/dev/null 2>&1; then
    bash scripts/setup.sh  # the dev extra (matplotlib for the plots) is not installed yet
fi
if [[ "${1:-}" == "realtime-paths" ]]; then
    shift
    exec .venv/bin/python benchmarks/bench_realtime_paths.py "$@"
fi
if [[ "${1:-}" == "realtime" ]]; then
    shift
    exec .venv/bin/python benchmarks/bench_realtime.py "$@"
fi
exec .venv/bin/python benchmarks/run.py "$@"
