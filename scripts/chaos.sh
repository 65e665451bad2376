#!/usr/bin/env bash
# Seeded, randomised chaos trials: the real sinks (Kafka, PostgreSQL and MariaDB with the
# coordinated and the markers protocol) under a real Spark driver process, with faults injected at
# random points -- driver process groups SIGKILLed, PostgreSQL, MariaDB and Kafka restarted or
# crashed, the broker frozen, query.stop(), task failures, zombie attempts -- and every trial
# checked by content afterwards (docs/chaos.md).
#
#   bash scripts/chaos.sh --trials 20 --seed 42             # kafka,pg-coordinated,pg-markers
#   bash scripts/chaos.sh --trials 5 --seed 42 --sinks pg-coordinated,pg-markers # a subset
#   bash scripts/chaos.sh --trials 12 --seed 42 --sinks maria-coordinated,maria-markers # MariaDB
#   bash scripts/chaos.sh --trials 1 --seed 42 --first 17 --keep                 # trial 17 again
#   bash scripts/chaos.sh --trials 10 --seed 42 --plan-only                      # plans only
#   bash scripts/chaos.sh --trials 10 --seed 42 \
#       --sinks pg-coordinated-ha,pg-markers-ha,maria-coordinated-ha,maria-markers-ha,kafka-ha
#                          # replicated targets: a failover or a broker restart in every trial
#
# It starts its own Kafka broker, PostgreSQL clusters and MariaDB server (those the sinks need;
# for the -ha sinks a primary and its synchronous standby or replica, or three Kafka brokers)
# unless TWOPHASE_* variables point at running ones (docs/development.md). Exits non-zero on any duplicate, loss or leftover.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ ! -x "$ROOT/.venv/bin/python" ]]; then
    bash scripts/setup.sh
fi
exec "$ROOT/.venv/bin/python" -m tests.chaos "$@"
