#!/usr/bin/env bash
# The network-partition experiment at default settings (minutes; not part of scripts/test.sh):
# for every sink -- PostgreSQL and MariaDB in both protocols, Kafka -- a partition cut in phase 1
# and in phase 2 must fail the batch well before 240 s, and a 20-second one must be a pause, with
# the sinks' default network_timeout / operation_timeout and retry policy. Each case prints the
# time it measured ("[partition at defaults] ..."); docs/guarantees.md quotes them.
# Needs root (network namespaces). Extra arguments go to pytest, e.g. -k kafka.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ ! -x "$ROOT/.venv/bin/python" ]]; then
    bash scripts/setup.sh
fi
exec "$ROOT/.venv/bin/python" -m pytest -p no:cacheprovider -m extended -s -q \
    tests/integration/partition/test_partition_defaults.py "$@"
