#!/usr/bin/env bash
# Set up the machine (scripts/setup.sh), then run the main job: examples/smoke_pipeline.py, which
# starts its own Kafka broker and PostgreSQL cluster, streams records through Spark and stops
# everything it started. Extra arguments go to the example (see its --help).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/setup.sh
exec "$ROOT/.venv/bin/python" examples/smoke_pipeline.py "$@"
