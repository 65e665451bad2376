#!/usr/bin/env bash
# The first run of a new user, checked: build the wheel, install it with [all] into a fresh
# virtualenv (pip picks the newest supported PySpark), then run the quick start's PostgreSQL
# (upsert) and Kafka snippets there against throwaway servers and count every row and record.
#
#   bash scripts/wheel_check.sh            # on Python 3.13
#   bash scripts/wheel_check.sh 3.10       # on another pyenv Python
#
# Not part of scripts/test.sh (it downloads PySpark when pip has no copy). Prints the counts and
# the versions it ran; exits non-zero unless both targets hold each row exactly once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON_VERSION="${1:-3.13}"
bash scripts/setup.sh >/dev/null
work="$(mktemp -d /tmp/twophase-wheel-check.XXXXXX)"
started=0
trap 'if ((started)); then "$ROOT/.venv/bin/twophase-dev" down >/dev/null 2>&1; fi; [[ -n "${KEEP:-}" ]] || rm -rf "$work"' EXIT

mkdir -p "$work/src"
cp -r pyproject.toml setup.py README.md twophase connectors "$work/src/"
.venv/bin/python -m build --wheel --no-isolation -o "$work/dist" "$work/src" >/dev/null
base="$(ls -d "$HOME"/.pyenv/versions/"$PYTHON_VERSION".* | sort -V | tail -n1)/bin/python"
"$base" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$(ls "$work"/dist/*.whl)[all]"

if ! .venv/bin/twophase-dev env >/dev/null 2>&1; then  # servers of 'twophase-dev up' are reused
    .venv/bin/twophase-dev up >/dev/null
    started=1
fi
eval "$(.venv/bin/twophase-dev env)"
# As a user with the virtualenv activated, away from the checkout (Spark's Python workers put
# their working directory on sys.path, where the checkout's twophase/ would shadow the wheel's).
cd "$work"
PATH="$work/venv/bin:$PATH" VIRTUAL_ENV="$work/venv" python "$ROOT/tests/deploy/quickstart_check.py" \
    "$TWOPHASE_PG_DSN" "$TWOPHASE_KAFKA_BOOTSTRAP" "$work/run" 2>"$work/stderr.log" | tail -n4
