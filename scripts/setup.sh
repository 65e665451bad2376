#!/usr/bin/env bash
# Idempotent bootstrap of a development or CI machine for twophase (Debian/Ubuntu).
#
#   bash scripts/setup.sh              everything the tests need (scripts/test.sh runs this)
#   bash scripts/setup.sh --for demo   only what the crash demo needs (scripts/demo.sh runs this)
#
# Installs only what is missing, so a second run takes seconds:
#   1. system packages: Java 17+ (Kafka 4 and Spark 4 need it), Maven (resolves the Kafka and
#      Spark jars), PostgreSQL server binaries (the tests run throwaway servers); for the tests
#      also MariaDB's server binaries and Debian's Node.js with npm (Azurite);
#   2. the .venv virtualenv (Python >= 3.10) with twophase installed editable plus the dev extra,
#      and the development tools (tools/: twophase_dev, the twophase-dev command) editable too;
#   3. the Kafka broker and Spark Kafka connector jars, downloaded once into ~/.m2 and cached
#      (for the tests also the Spark Connect server's and the Hadoop GCS connector's);
#   4. for the tests, the cloud-storage emulators of the coordinator-log tests, pinned in
#      tools/twophase_dev/_emulators/_install.py: fake-gcs-server (built with Go from the Go module proxy;
#      a machine without Go gets the toolchain pinned in tools/twophase_dev/_go.py from the same
#      proxy, into the cache) and Azurite (npm), installed once into ~/.cache/twophase/emulators.
#   5. for the tests, the class-data archives that Spark's JVMs and Kafka brokers start from
#      (tools/twophase_dev/_jvm.py, tools/twophase_dev/_kafka/_archive.py), made once per Java,
#      PySpark and Kafka into ~/.cache/twophase/jvm.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
started=$SECONDS
log() { printf '[setup] %s\n' "$*"; }

profile=tests
while (($#)); do
    case "$1" in
        --for) profile="${2:-}"; shift 2 || shift ;;
        --for=*) profile="${1#--for=}"; shift ;;
        *) log "error: unknown argument '$1' (usage: setup.sh [--for demo|tests])"; exit 2 ;;
    esac
done
if [[ "$profile" != tests && "$profile" != demo ]]; then
    log "error: --for takes 'demo' or 'tests', not '$profile'"
    exit 2
fi

# --------------------------------------------------------------------------------------------
# 1. System packages
# --------------------------------------------------------------------------------------------
java_ok() {
    command -v java >/dev/null 2>&1 || return 1
    local major
    major="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)"
    [[ -n "$major" && "$major" -ge 17 ]]
}

python_ok() {  # a Python >= 3.10 that can create virtualenvs
    "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' >/dev/null 2>&1
}

apt_install() {
    local sudo=()
    if [[ $EUID -ne 0 ]]; then sudo=(sudo); fi
    export DEBIAN_FRONTEND=noninteractive
    # Refresh the package lists only if they do not know every package (fresh machine).
    if ! apt-cache show "$@" >/dev/null 2>&1; then
        log "apt-get update"
        "${sudo[@]}" apt-get update -qq
    fi
    log "apt-get install $*"
    if ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@"; then
        # Stale lists (a package version was superseded): refresh once and retry.
        "${sudo[@]}" apt-get update -qq
        "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@"
    fi
}

first_available() {  # first package name apt knows (after an update if needed)
    local pkg
    for pkg in "$@"; do
        if apt-cache show "$pkg" >/dev/null 2>&1; then echo "$pkg"; return 0; fi
    done
    echo "$1"
}

BASE_PYTHON=""
for candidate in python3.13 python3.12 python3.11 python3.10 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
        BASE_PYTHON="$(command -v "$candidate")"
        break
    fi
done

packages=()
java_ok || packages+=("$(first_available openjdk-17-jdk-headless openjdk-21-jdk-headless default-jdk-headless)")
command -v mvn >/dev/null 2>&1 || packages+=(maven)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || packages+=(postgresql)
# MariaDB: the -core packages hold mariadbd, mariadb-install-db and the mariadb client without
# mariadb-server's system service, so nothing starts on port 3306 (twophase_dev runs its own).
if [[ "$profile" == tests ]]; then
    if [[ ! -x /usr/sbin/mariadbd || ! -x /usr/bin/mariadb-install-db ]]; then
        packages+=(mariadb-server-core)
    fi
    command -v mariadb >/dev/null 2>&1 || packages+=(mariadb-client-core)
    # Azurite, the Azure Blob emulator: Debian's Node.js and npm (npm alone pulls nodejs in).
    command -v npm >/dev/null 2>&1 || packages+=(npm)
fi
if [[ ! -x .venv/bin/python && -z "$BASE_PYTHON" ]]; then packages+=(python3 python3-venv); fi
if ((${#packages[@]})); then
    apt_install "${packages[@]}"
else
    log "system packages: all that the $profile need are installed"
fi
java_ok || { log "error: Java 17 or newer is still not the default 'java'"; exit 1; }

# --------------------------------------------------------------------------------------------
# 2. Virtualenv
# --------------------------------------------------------------------------------------------
PY="$ROOT/.venv/bin/python"
if ! python_ok "$PY"; then
    if [[ -z "$BASE_PYTHON" ]]; then BASE_PYTHON="$(command -v python3)"; fi
    log "creating .venv with $BASE_PYTHON ($("$BASE_PYTHON" -V 2>&1))"
    rm -rf .venv
    "$BASE_PYTHON" -m venv .venv
fi

# pip is skipped when nothing changed since the last successful install (same pyproject.toml,
# setup.py, tools/pyproject.toml and constraints, same checkout location, imports work).
stamp_file=.venv/.twophase-setup-stamp
stamp="$(cat pyproject.toml setup.py tools/pyproject.toml scripts/constraints.txt | sha256sum | cut -d' ' -f1) $ROOT"
imports="twophase_dev, twophase.connectors, pyspark, confluent_kafka, psycopg2, pymysql, pytest"
if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" ]] \
    && "$PY" -c "import $imports" >/dev/null 2>&1; then
    log "virtualenv: up to date ($("$PY" -V))"
else
    log "pip install -e '.[dev]' -e ./tools into .venv"
    # A new venv carries the interpreter's bundled (old) pip and setuptools; the packaging
    # tests build without isolation, so the venv's own setuptools must read PEP 639 metadata.
    "$PY" -m pip install --quiet --disable-pip-version-check --upgrade pip "setuptools>=77" wheel
    "$PY" -m pip install --quiet --disable-pip-version-check \
        -c scripts/constraints.txt -e '.[dev]' -e ./tools
    echo "$stamp" >"$stamp_file"
fi
# The checkout's own modules byte-compiled, as pip compiles an installed package's: where
# PYTHONDONTWRITEBYTECODE is set, every Python process of a run (drivers, Spark's Python workers,
# the examples) would otherwise compile them from source at each import (0.3 CPU-s a process,
# docs/development.md). A stale file is compiled again at import, as always.
"$PY" -m compileall -q -j 0 twophase connectors tools/twophase_dev examples tests >/dev/null \
    || log "warning: some modules did not byte-compile (a syntax error? ruff and pytest will say)"

# --------------------------------------------------------------------------------------------
# 3. Jars (Maven downloads them once; the resolved classpaths are cached in ~/.cache/twophase),
# 4. beside them, for the tests, the storage emulators (GCS, Azure Blob) of the coordinator-log
#    tests; both are skipped once installed. fake-gcs-server is a Go program: `go install` runs
#    with the machine's Go, or else with the pinned toolchain fetched from the Go module proxy.
# --------------------------------------------------------------------------------------------
if [[ "$profile" == demo ]]; then
    "$PY" -m twophase_dev resolve --for demo | sed 's/^/[setup] jars: /'
else
    "$PY" -m twophase_dev emulators > >(sed 's/^/[setup] emulators: /') 2>&1 &
    emulators=$!
    "$PY" -m twophase_dev resolve | sed 's/^/[setup] jars: /'
    wait "$emulators" || { log "error: installing the storage emulators failed (above)"; exit 1; }
    # 5. The class-data archives of Spark's classes and of the Kafka broker's (a minute, once per
    #    Java, PySpark and Kafka): every Spark JVM and Kafka broker of the tests maps its archive
    #    and starts in about half to two thirds of the time.
    "$PY" -m twophase_dev class-archive | sed 's/^/[setup] class-data archive: /'
fi

log "done for the $profile in $((SECONDS - started)) s"
