#!/usr/bin/env bash
# The crash demo (examples/demo/crash_demo.py): set up the machine (scripts/setup.sh, seconds once done),
# start a local Kafka broker and PostgreSQL server on free ports, stream order events through Spark
# into PostgreSQL and Kafka with twophase's exactly-once sinks (and through a naive foreachBatch
# beside them), SIGKILL the Spark driver at random points and restart it, then check every sink.
# About two minutes on 2 cores. Extra arguments go to the demo: 'bash scripts/demo.sh --help'
# lists them (--events, --kills, --seed, --keep-servers, ...). Exit status 0: both twophase sinks
# hold every event exactly once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

for arg in "$@"; do  # --help needs no setup
    if [[ "$arg" == "-h" || "$arg" == "--help" ]]; then
        if [[ -x "$ROOT/.venv/bin/python" ]]; then
            exec "$ROOT/.venv/bin/python" examples/demo/crash_demo.py --help
        fi
        sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
        echo "(run 'bash scripts/setup.sh' first for the list of options)"
        exit 0
    fi
done

bash scripts/setup.sh --for demo
exec "$ROOT/.venv/bin/python" examples/demo/crash_demo.py "$@"
