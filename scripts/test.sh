#!/usr/bin/env bash
# Set up the machine (scripts/setup.sh), then run every check and the whole test suite:
# ruff (lint and format), mypy --strict on the package and tools/twophase_dev, the import contracts
# (import-linter), the documentation site, and pytest's default selection (every test but the
# bench and extended ones). Every step runs even if an earlier one failed; the
# exit status is non-zero if any failed. Extra arguments go to pytest, e.g.
# 'bash scripts/test.sh -x -k kafka' (a -m of your own replaces the default selection's).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
started=$SECONDS

bash scripts/setup.sh

PY="$ROOT/.venv/bin/python"
failed=()
step() {  # step NAME COMMAND...: run it, remember a failure, carry on
    local name="$1"
    shift
    printf '\n==> %s\n' "$name"
    local status=0
    "$@" || status=$?
    if [[ $status -ne 0 ]]; then
        failed+=("$name (exit $status)")
    fi
    return 0
}

step "ruff check" "$PY" -m ruff check .
step "ruff format --check" "$PY" -m ruff format --check .
step "mypy --strict on twophase/, connectors/ and tools/twophase_dev/" \
    "$PY" -m mypy twophase connectors tools/twophase_dev
step "import contracts (lint-imports, see [tool.importlinter] in pyproject.toml)" \
    "$ROOT/.venv/bin/lint-imports" --no-cache
step "documentation site (mkdocs build --strict)" bash scripts/docs.sh build

pytest_status=0
printf '\n==> pytest\n'
# Tests start their own servers unless TWOPHASE_* variables point at running ones
# (docs/development.md). --timeout: no single test may hang the run. Two workers (pytest-xdist):
# the suite is bound by CPU on two cores, and a third worker only made Spark's own waits time out;
# --dist loadgroup keeps the root tests' network namespaces, the standalone cluster and the
# Connect server each on one worker (tests/workers.py; docs/development.md, "Where the suite's
# time goes"). '-n 0' runs everything in one process.
"$PY" -m pytest -p no:cacheprovider --timeout=1200 --durations=20 -n 2 --dist loadgroup "$@" \
    || pytest_status=$?
if [[ $pytest_status -eq 5 ]]; then
    echo "pytest collected no tests: treating that as a failure" >&2
fi
if [[ $pytest_status -ne 0 ]]; then
    failed+=("pytest (exit $pytest_status)")
fi

printf '\n==> finished in %d s\n' "$((SECONDS - started))"
if ((${#failed[@]})); then
    printf 'FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "all checks passed"
