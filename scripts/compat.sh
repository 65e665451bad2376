#!/usr/bin/env bash
# The support matrix, run for real: every supported PySpark version (the newest patch of each that
# this machine can install and, for Spark's Kafka source, whose Kafka connector Maven Central
# serves) on a Python of its own, each in a virtualenv of its own under ~/.cache/twophase/compat.
#
#   bash scripts/compat.sh                 # every cell, then docs/compatibility.md
#   bash scripts/compat.sh --cells 3.5     # the cells whose PySpark starts with 3.5
#   bash scripts/compat.sh --report-only   # rewrite docs/compatibility.md from build/compat/
#
# Per cell: the unit tests, the Spark fake-sink suite, both connectors end to end on the real
# servers (PostgreSQL upsert/CDC with a driver kill per protocol; Kafka through Spark's Kafka
# source where its connector is served), a real driver killed and restarted for each connector
# (the chaos harness's process-group kill), and Spark Connect (the server from the PySpark wheel,
# or on 3.5, whose wheel has none, spark-connect_2.12 of the same version from Maven Central);
# where the Kafka source is served, the deployment test (the wheel in a packed virtualenv,
# spark-submit to a standalone cluster of that version, a driver kill) and, from 4.1, real-time
# mode (a real driver into PostgreSQL, its Python workers and itself killed; the refusals). Results go to
# build/compat/<cell>.json; the report to docs/compatibility.md.
# Not part of scripts/test.sh (about 5 minutes a cell).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CACHE="${TWOPHASE_COMPAT_DIR:-$HOME/.cache/twophase/compat}"
OUT="$ROOT/build/compat"

# cell: PySpark, Python, Kafka source (Maven Central serves spark-sql-kafka-0-10 of that version).
# Checked 2026-11-24: 3.5.7 is the newest 3.5 patch with a served _2.12 connector (3.5.8 and 3.5.9
# are not served), 4.0.4 and 4.1.3 the newest served of theirs, none of 4.3.0.
# Checked 2026-11-26: the 3.5 Connect server, spark-connect_2.12, is served for 3.5.0, 3.5.1, 3.5.4,
# 3.5.5 and 3.5.7 (not 3.5.2, 3.5.3, 3.5.6, 3.5.8, 3.5.9); from 4.0 the wheel carries it.
CELLS=(
    "3.5.7 3.10 yes"
    "4.0.4 3.12 yes"
    "4.1.3 3.11 yes"
    "4.2.0 3.11 yes"
    "4.3.0 3.13 no"
)

only=""
report_only=0
while (($#)); do
    case "$1" in
        --cells) only="$2"; shift 2 ;;
        --report-only) report_only=1; shift ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

bash scripts/setup.sh >/dev/null  # the servers' binaries, Maven, the project's .venv
mkdir -p "$OUT" "$CACHE"

python_for() {  # the newest pyenv Python of a minor version
    local found
    found="$(ls -d "$HOME"/.pyenv/versions/"$1".* 2>/dev/null | sort -V | tail -n1)"
    [[ -n "$found" ]] || { echo "no Python $1 under ~/.pyenv/versions" >&2; return 1; }
    echo "$found/bin/python"
}

venv_for() {  # venv_for PYSPARK PYTHON -> path of its python, created once
    local venv="$CACHE/pyspark-$1-py$2" base
    local -a packages=(
        "pyspark[connect]==$1" "pandas>=2.2,<3" pyarrow cloudpickle psycopg2-binary
        confluent-kafka pytest pytest-timeout hypothesis "boto3==1.44.5" "moto[server]==5.2.5"
        "google-auth==2.63.0" requests "azure-storage-blob==12.31.1" "azure-identity==1.27.0"
        build venv-pack "tomli>=2; python_version < '3.11'" "opentelemetry-api>=1.27"
    )
    if [[ ! -x "$venv/bin/python" ]]; then
        base="$(python_for "$2")"
        rm -rf "$venv"
        "$base" -m venv "$venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check -U pip "setuptools>=77" wheel
    fi
    # .ready holds the package list installed: a venv of an older list gets the new one.
    if [[ "$(cat "$venv/.ready" 2>/dev/null)" != "${packages[*]}" ]]; then
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "${packages[@]}"
        printf '%s' "${packages[*]}" >"$venv/.ready"
    fi
    # The checkout's code, as it is now (no dependencies: the cell's PySpark stays).
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e . -e ./tools
    echo "$venv/bin/python"
}

run_cell() {
    local spark="$1" python="$2" kafka_source="$3" py name
    name="pyspark-$spark-py$python"
    py="$(venv_for "$spark" "$python")"
    # -x: a failing step stops at its first failure (the matrix says which version breaks what).
    local pytest=("$py" -m pytest -q -p no:cacheprovider -x --timeout=600)
    local -a steps=(
        "unit|tests/unit"
        "spark fake sinks|tests/spark/test_spark_fake_sink.py"
        "postgres end to end, a driver kill per protocol|tests/integration/jdbc/test_postgres_spark.py tests/integration/jdbc/test_postgres_keyed.py"
        "driver killed and restarted, each connector|tests/chaos/test_target_faults.py -k driver_killed_with_its_process_group"
    )
    if [[ "$kafka_source" == yes ]]; then
        steps+=("kafka through Spark's Kafka source|tests/integration/kafka/test_kafka_spark.py")
        steps+=("deployment: the wheel shipped with spark-submit, a driver kill|tests/deploy")
        # Spark's real-time mode (4.1 and later) reads Kafka only.
        if [[ "$(printf '%s\n' 4.1 "$spark" | sort -V | head -n1)" == 4.1 ]]; then
            steps+=("real-time mode, kills|tests/realtime tests/spark/test_realtime_refusals.py")
        fi
    fi
    # Every cell: twophase_dev starts the Connect server from the wheel, or resolves it with Maven
    # where the wheel has none (3.5; twophase_dev._spark._jars.spark_connect_jars).
    steps+=("spark connect|tests/connect")
    local results=() step label selection status started
    for step in "${steps[@]}"; do
        label="${step%%|*}"
        selection="${step#*|}"
        printf '\n==> %s: %s\n' "$name" "$label"
        started=$SECONDS
        local log="$OUT/$name-${label%% *}.log" summary
        status=0
        # shellcheck disable=SC2086
        TWOPHASE_SPARK_KAFKA="$([[ $kafka_source == yes ]] && echo 1 || echo 0)" \
            "${pytest[@]}" $selection >"$log" 2>&1 || status=$?
        tail -n 3 "$log"
        summary="$(grep -E '[0-9]+ (passed|failed|error)' "$log" | tail -n1 | tr -d '=' | xargs || true)"
        results+=("$(printf '{"step": "%s", "status": %d, "seconds": %d, "summary": "%s"}' \
            "$label" "$status" "$((SECONDS - started))" "${summary//\"/\'}")")
    done
    local versions
    versions="$("$py" -c 'import platform, pyspark; print(pyspark.__version__, platform.python_version())')"
    {
        printf '{"cell": "%s", "pyspark": "%s", "python": "%s", "kafka_source": "%s",\n' \
            "$name" "${versions% *}" "${versions#* }" "$kafka_source"
        printf ' "date": "%s", "commit": "%s", "steps": [%s]}\n' "$(date -u +%F)" \
            "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes')" \
            "$(IFS=,; echo "${results[*]}")"
    } >"$OUT/$name.json"
}

if ((!report_only)); then
    for cell in "${CELLS[@]}"; do
        read -r spark python kafka_source <<<"$cell"
        if [[ -n "$only" && "$spark" != "$only"* ]]; then continue; fi
        run_cell "$spark" "$python" "$kafka_source"
    done
fi
.venv/bin/python scripts/compat_report.py "$OUT" docs/compatibility.md
