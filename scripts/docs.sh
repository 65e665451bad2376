#!/usr/bin/env bash
# The documentation site (MkDocs + Material + mkdocstrings, configured in mkdocs.yml).
#   bash scripts/docs.sh build   # strict build into build/site (a warning fails it)
#   bash scripts/docs.sh serve   # live preview on http://127.0.0.1:8000
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[[ -x .venv/bin/mkdocs ]] || bash scripts/setup.sh
export NO_MKDOCS_2_WARNING=1  # the theme's notice about its successor is not a build problem

case "${1:-build}" in
    build) exec .venv/bin/mkdocs build --strict --site-dir build/site ;;
    serve) exec .venv/bin/mkdocs serve --strict --dev-addr 127.0.0.1:8000 ;;
    *) echo "usage: bash scripts/docs.sh [build|serve]" >&2; exit 2 ;;
esac
