#!/usr/bin/env bash
# The documentation site (MkDocs + Material + mkdocstrings, configured in mkdocs.yml).
#   bash scripts/docs.sh build   # strict build into build/site (a warning fails it)
#   bash scripts/docs.sh serve   # live preview on http://127.0.0.1:8000
#
# Needs a Python >= 3.10 with venv and pip, nothing else: not Java, Maven or PostgreSQL
# (scripts/setup.sh). The tools come from .venv when it has them (the dev extra installs them),
# else from a virtualenv of their own, build/docs-venv, made on the first run. That one holds
# MkDocs, Material, mkdocstrings and twophase itself, editable: the API reference
# (docs/reference/core.md) imports the package to inspect it, so its dependencies (pyarrow,
# pandas, cloudpickle) come too, and the tables of options (scripts/docs_tables.py) import the
# factories, so the kafka and jdbc extras do as well (confluent-kafka, psycopg2-binary: wheels).
# PySpark is not needed.
# $PYTHON names the interpreter for build/docs-venv (default: python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
case "${1:-build}" in
    build | serve) ;;
    *) echo "usage: bash scripts/docs.sh [build|serve]" >&2; exit 2 ;;
esac

# The same bounds as the dev extra of pyproject.toml; ruff formats the signatures of the API
# reference (separate_signature), at the version scripts/constraints.txt pins.
REQUIREMENTS=("mkdocs>=1.6" "mkdocs-material>=9.5" "mkdocstrings[python]>=0.26" "ruff")

has_tools() {  # the interpreter of a virtualenv can run mkdocs.yml's theme and plugins
    "$1/bin/python" -c 'import mkdocs, material, mkdocstrings_handlers.python, twophase' \
        >/dev/null 2>&1
}

VENV=.venv
if ! { [[ -x .venv/bin/mkdocs ]] && has_tools .venv; }; then
    VENV=build/docs-venv
    STAMP="$VENV/.twophase-docs-stamp"
    WANTED="${REQUIREMENTS[*]} -e $ROOT[kafka,jdbc]"
    if ! { has_tools "$VENV" && [[ "$(cat "$STAMP" 2>/dev/null)" == "$WANTED" ]]; }; then
        PYTHON="${PYTHON:-python3}"
        if ! "$PYTHON" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
            echo "docs.sh: needs a Python >= 3.10 with venv (set PYTHON=...)" >&2
            exit 1
        fi
        echo "[docs] creating $VENV (MkDocs, Material, mkdocstrings, twophase)" >&2
        rm -rf "$VENV"
        "$PYTHON" -m venv "$VENV"
        LOG="$VENV/pip.log"
        if ! "$VENV/bin/python" -m pip install -c scripts/constraints.txt \
            "${REQUIREMENTS[@]}" -e "$ROOT[kafka,jdbc]" >"$LOG" 2>&1; then
            tail -n 30 "$LOG" >&2
            echo "docs.sh: pip install failed; the whole log: $LOG" >&2
            exit 1
        fi
        echo "$WANTED" >"$STAMP"
    fi
fi
export NO_MKDOCS_2_WARNING=1  # the theme's notice about its successor is not a build problem

case "${1:-build}" in
    build) exec "$VENV/bin/mkdocs" build --strict --site-dir build/site ;;
    serve) exec "$VENV/bin/mkdocs" serve --strict --dev-addr 127.0.0.1:8000 ;;
esac
