"""Turn ``results.json`` into the Markdown report (``docs/benchmarks.md``) and its PNG plots.

The plots go to ``<report dir>/<report name without .md>/`` (``docs/benchmarks/``), linked
relatively, so that the documentation site (MkDocs, strict) finds them. The hand-written profiling
findings in ``benchmarks/findings.md`` are included as they are.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench_common import BENCH_DIR

FINDINGS = BENCH_DIR / "findings.md"

INTRO = {
    "kafka": (
        "One micro-batch of N records read from Parquet (2 Spark tasks) into a fresh 4-partition "
        "topic, `trigger(availableNow=True)`; records/s over the query's wall time. Spark's sink "
        "runs with the same codec and acks as twophase's defaults (`kafka.compression.type=lz4`, "
        "`kafka.acks=all`), once more with `kafka.enable.idempotence=true`. Every record is "
        "checked to be visible to `read_committed` consumers."
    ),
    "postgres": (
        "One micro-batch of N rows from Parquet (2 Spark tasks) through the JDBC sink (both "
        "protocols) or through Spark's JDBC writer in `foreachBatch` (`batchsize=10000`, "
        "`reWriteBatchedInserts=true`; for upsert an unlogged staging table and one "
        "`INSERT ... ON CONFLICT`); and without Spark, one process: raw `COPY` on one connection "
        "(pre-rendered CSV) against the connector driven by the coordinator (`LocalRunner`, 4 "
        "partitions). Durable server (fsync on); upserts update every row of a full table."
    ),
    "mariadb": (
        "The same shapes, rows and runs as PostgreSQL's, into MariaDB (InnoDB, binary log on, "
        "`innodb_flush_log_at_trx_commit=1`, `sync_binlog=1`): the MariaDB sink (both "
        "protocols) against Spark's JDBC writer with MariaDB Connector/J (`batchsize=10000`, "
        "`useBulkStmts=true`: Connector/J 3 removed `rewriteBatchedStatements` and batches with "
        "its bulk protocol; a `jdbc:mysql:` URL with `permitMysqlScheme`, so that Spark quotes "
        "names as MySQL does; for upsert an InnoDB staging table and one `INSERT ... ON "
        "DUPLICATE KEY UPDATE`); and without Spark, raw `LOAD DATA LOCAL INFILE` of a "
        "pre-rendered CSV file on one connection against the connector under `LocalRunner`."
    ),
    "overhead": (
        "Small micro-batches (Spark's `rate-micro-batch` source, 4 partitions, batches back to "
        "back): the wall time of the `foreachBatch` call per batch, for each sink and for a plain "
        "non-transactional `foreachBatch` writing the same rows to the same target "
        "(`mapInArrow` + `execute_values` + commit per task; a plain librdkafka producer + "
        "`flush()` per task). Added = median of the sink - median of the plain writer. The "
        "sink's metrics split its batch: phase 1 (the Spark job: write + prepare, or write + "
        "commit with marker), decision (the log's decision or intent record), phase 2 (commits "
        "from the driver, or the committed record) and the rest."
    ),
    "recovery": (
        "`LocalRunner` against the real servers, coordinator log fsync'd; the driver crashes "
        "with N in-doubt transactions and restarts; timed: `coordinator.start(sink)` (the sink's "
        "`open()`, loading and claiming the log, recovery). Spark start-up excluded."
    ),
    "scaling": (
        "Per-batch cost against partitions per batch (1,000 rows per batch, through Spark), "
        "against batches already run (thousands of tiny batches through `LocalRunner` into the "
        "real PostgreSQL), and the Python workers' peak memory while ~1 GB goes through Spark in "
        "batches of different sizes."
    ),
}


def _num(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if unit in ("s",):
        return f"{value:.3f}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _verdict(check: dict[str, Any]) -> str:
    if check["met"] is None:
        return ""
    return "met" if check["met"] else "**missed**"


def _goal(check: dict[str, Any]) -> str:
    if check["goal"] is None:
        return "-"
    unit = check.get("unit", "")
    return f"{check['op']} {check['goal']:g}{'x' if unit == 'x' else ' ' + unit}"


def _check_value(check: dict[str, Any]) -> str:
    unit = check.get("unit", "")
    value = _num(check["value"], unit)
    spread = check.get("spread")
    if spread and len(spread) == 2 and spread[0] != spread[1]:
        value += f" ({_num(spread[0], unit)} to {_num(spread[1], unit)})"
    return value + ("" if unit == "x" else f" {unit}")


def _measure_table(entries: list[dict[str, Any]]) -> list[str]:
    lines = ["| case | measured | median | min | max | n |", "|---|---|---:|---:|---:|---:|"]
    for e in entries:
        unit = e["unit"]
        lines.append(
            f"| {e['group']} | {e['name']} | {_num(e['median'])} {unit} | {_num(e['min'])} | "
            f"{_num(e['max'])} | {e['n']} |"
        )
    return lines


def _checks_table(checks: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| check | value (spread) | goal | verdict |",
        "|---|---:|---|---|",
    ]
    for c in checks:
        lines.append(f"| {c['label']} | {_check_value(c)} | {_goal(c)} | {_verdict(c)} |")
    return lines


# ------------------------------------------------------------------ plots
def _plots(results: dict[str, Any], folder: Path) -> dict[str, list[str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    folder.mkdir(parents=True, exist_ok=True)
    made: dict[str, list[str]] = {}
    comps = results["comparisons"]

    def save(fig: Any, name: str, comparison: str) -> None:
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
        made.setdefault(comparison, []).append(name)

    def bars(ax: Any, entries: list[dict[str, Any]], title: str, unit: str) -> None:
        names = [e["name"] for e in entries]
        med = [e["median"] for e in entries]
        err = [
            [m - e["min"] for m, e in zip(med, entries, strict=True)],
            [e["max"] - m for m, e in zip(med, entries, strict=True)],
        ]
        colors = ["#d62728" if n.startswith("twophase") else "#7f7f7f" for n in names]
        ax.barh(names, med, xerr=err, color=colors, capsize=3)
        ax.invert_yaxis()
        ax.xaxis.set_major_formatter(
            FuncFormatter(lambda v, _pos: f"{v / 1000:,.0f}k" if v >= 1000 else f"{v:,.0f}")
        )
        ax.set_title(title)
        ax.set_xlabel(unit)

    if "kafka" in comps:
        entries = comps["kafka"]["measurements"]
        groups = list(dict.fromkeys(e["group"] for e in entries))
        fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 2.8), squeeze=False)
        for ax, group in zip(axes[0], groups, strict=True):
            bars(ax, [e for e in entries if e["group"] == group], f"{group} records", "records/s")
        save(fig, "kafka.png", "kafka")

    for jdbc in ("postgres", "mariadb"):
        if jdbc not in comps:
            continue
        entries = comps[jdbc]["measurements"]
        groups = list(dict.fromkeys(e["group"] for e in entries))
        cols = 2
        rows = -(-len(groups) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(11, 2.9 * rows), squeeze=False)
        for ax, group in zip(axes.flat, groups, strict=False):
            bars(ax, [e for e in entries if e["group"] == group], group, "rows/s")
        for ax in list(axes.flat)[len(groups) :]:
            ax.axis("off")
        save(fig, f"{jdbc}.png", jdbc)

    if "overhead" in comps:
        cmp = comps["overhead"]
        entries = cmp["measurements"]
        kinds = list(dict.fromkeys(e["name"] for e in entries))
        sizes = sorted({e["rows"] for e in entries})
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
        for kind in kinds:
            ys = [
                next(e["median"] for e in entries if e["name"] == kind and e["rows"] == s)
                for s in sizes
            ]
            style = "-o" if kind.startswith("twophase") else "--s"
            ax1.plot(sizes, ys, style, label=kind)
        ax1.set_xscale("log")
        ax1.set_xlabel("rows per micro-batch (4 partitions)")
        ax1.set_ylabel("median foreachBatch time (ms)")
        ax1.set_title("Time per micro-batch")
        ax1.legend(fontsize=8)
        breakdown = cmp["series"].get("breakdown", {})
        labels, stacks = [], {"write vs plain": [], "decision": [], "phase 2": [], "rest": []}
        for group, row in breakdown.items():
            for kind, data in row.items():
                ph = data["phases_ms"]
                short = kind.replace("twophase ", "").replace("coordinated", "coord.")
                labels.append(f"{short}\n{group.split()[0]}")
                stacks["write vs plain"].append(ph.get("phase1", 0) - data["baseline_ms"])
                stacks["decision"].append(ph.get("decision", 0))
                stacks["phase 2"].append(ph.get("phase2", 0))
                stacks["rest"].append(ph.get("other", 0))
        bottom_pos = [0.0] * len(labels)
        bottom_neg = [0.0] * len(labels)
        for part, values in stacks.items():
            bottoms = [
                bp if v >= 0 else bn
                for v, bp, bn in zip(values, bottom_pos, bottom_neg, strict=True)
            ]
            ax2.bar(range(len(labels)), values, bottom=bottoms, label=part)
            for i, v in enumerate(values):
                if v >= 0:
                    bottom_pos[i] += v
                else:
                    bottom_neg[i] += v
        added = [data["added_ms"] for row in breakdown.values() for data in row.values()]
        ax2.plot(range(len(labels)), added, "k_", markersize=14, label="added (measured)")
        ax2.axhline(50, color="red", linestyle=":", label="goal 50 ms")
        ax2.set_xticks(range(len(labels)))
        ax2.set_xticklabels(labels, fontsize=7)
        ax2.set_xlabel("sink / rows per micro-batch")
        ax2.set_ylabel("ms per batch over the plain writer")
        ax2.set_title("Added latency, by phase (medians)")
        ax2.legend(fontsize=7)
        save(fig, "overhead.png", "overhead")

    if "recovery" in comps:
        series = comps["recovery"]["series"]["seconds"]
        fig, ax = plt.subplots(figsize=(6, 4))
        for case, points in series.items():
            xs = sorted(int(n) for n in points)
            ax.plot(
                xs,
                [points[str(n)] if str(n) in points else points[n] for n in xs],
                "-o",
                label=case,
            )
        ax.axhline(1.0, color="red", linestyle=":", label="goal for 100: 1 s")
        ax.axvline(100, color="red", linestyle=":", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("in-doubt transactions")
        ax.set_ylabel("recovery (s)")
        ax.set_title("Recovery work after a driver crash")
        ax.legend(fontsize=8)
        save(fig, "recovery.png", "recovery")

    if "scaling" in comps:
        series = comps["scaling"]["series"]
        if "partitions" in series:
            parts = series["partitions"]["points"]
            table = series["partitions"]["table"]
            fig, ax = plt.subplots(figsize=(6, 4))
            kinds = list(next(iter(table.values())))
            for kind in kinds:
                ax.plot(
                    parts,
                    [table[f"{p} partitions"][kind]["added_ms"] for p in parts],
                    "-o",
                    label=kind,
                )
            ax.set_xlabel("partitions (transactions) per micro-batch, 1,000 rows")
            ax.set_ylabel("added ms per batch over the plain writer")
            ax.set_title("Overhead vs partitions per batch")
            ax.legend(fontsize=8)
            save(fig, "scaling_partitions.png", "scaling")
        if "batches" in series:
            fig, ax = plt.subplots(figsize=(6, 4))
            for protocol, data in series["batches"].items():
                pts = data["binned_median_ms"]
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    "-o",
                    markersize=3,
                    label=f"{protocol} protocol",
                )
            ax.set_ylim(bottom=0)
            ax.set_xlabel("batches already run")
            ax.set_ylabel("median ms per batch (bins)")
            ax.set_title("Per-batch cost as the log and markers grow")
            ax.legend(fontsize=8)
            save(fig, "scaling_batches.png", "scaling")
        if "memory" in series:
            fig, ax = plt.subplots(figsize=(6, 4))
            sizes = series["memory"]["sizes_mb"]
            for label, data in series["memory"]["peaks"].items():
                ys = [
                    data[str(s)]["max_process_mb"] if str(s) in data else data[s]["max_process_mb"]
                    for s in sizes
                ]
                ax.plot(sizes, ys, "-o", label=label)
            ax.set_xscale("log")
            ax.set_xticks(sizes)
            ax.set_xticklabels([str(s) for s in sizes])
            ax.minorticks_off()
            ax.set_ylim(bottom=0)
            ax.set_xlabel(f"micro-batch size (MB; {series['memory']['total_mb']} MB in all)")
            ax.set_ylabel("peak RSS of one Python worker (MiB)")
            ax.set_title("Python worker memory vs batch size")
            ax.legend(fontsize=8)
            save(fig, "scaling_memory.png", "scaling")
    return made


# ------------------------------------------------------------------ Markdown
def write(results: dict[str, Any], report: Path) -> None:
    """Write the report to ``report`` and the plots beside it."""
    folder = report.parent / report.stem
    plots = _plots(results, folder)
    comps = results["comparisons"]
    m = results["machine"]
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by benchmarks/run.py (scripts/bench.sh) from benchmarks/results.json; "
        "edit benchmarks/bench_report.py or benchmarks/findings.md instead. -->",
        "",
        "Every twophase sink beside what a user would pick instead, measured in one run on one "
        "machine, each ratio against a baseline measured in the same run. Reproduce from the "
        "repository root:",
        "",
        "```bash",
        "scripts/bench.sh                 # everything; --quick: tiny sizes; --only NAME: one part",
        "```",
        "",
        f"- **Run**: `{results['command']}`, {results['generated']}, commit {results['commit']}, "
        f"{results.get('seconds', 0) / 60:.0f} min wall time"
        + (" (quick: tiny sizes, 1 repetition: not representative)" if results["quick"] else "")
        + (
            "; the comparisons it did not run are kept from earlier runs, and each section "
            "below says when, by what and at which commit it was measured"
            if any(c.get("command") != results["command"] for c in comps.values())
            else ""
        )
        + ".",
        f"- **Machine**: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, Linux "
        f"{m['kernel']}; Kafka broker, PostgreSQL, MariaDB and Spark (`local[2]`) on the same "
        "machine.",
        "- **What this means for a cluster**: every number here comes from that one machine, "
        "where the sink, the baseline it is compared with, Spark and the server all share "
        f"{m['cores']} cores. A ratio compares two writers under the same constraint; it is not "
        "a prediction for a cluster, where executors, brokers and database servers have cores of "
        "their own (the CPU a sink spends in Python workers then no longer slows the server "
        "down) but every round trip between hosts is a network one (phase 2's commits, the "
        'markers, recovery\'s fencing), so the per-batch costs of the comparisons "overhead" '
        'and "recovery" grow with the network latency to the target. The absolute times '
        "(seconds, ms, rows per second) are this machine's, and the pages that quote them say "
        "so: what a cluster reaches has to be measured on it.",
        f"- **Load average** (1, 5, 15 min) at the start: {results['load_at_start']}, at the end: "
        f"{results.get('load_at_end', '-')}.",
    ]
    quiet = results.get("quiet_wait")
    if quiet:
        if quiet["quiet"]:
            lines.append(
                f"- Waited {quiet['waited_s']} s for a quiet machine (1-minute load average "
                f"{quiet['load'][0]:.2f} < 1.0) before starting."
            )
        else:
            lines.append(
                f"- **The machine never got quiet**: after waiting {quiet['waited_s'] // 60} min "
                f"the 1-minute load average was still {quiet['load'][0]:.2f} (seen: "
                f"{', '.join(f'{x:.1f}' for x in quiet.get('observed', []))}); other work shared "
                "the 2 cores during the run, so absolute numbers are low and ratios noisier."
            )
    versions = results.get("versions", {})
    if versions:
        lines.append("- **Versions**: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".")
    lines += ["", "## Summary", "", "Every check with a goal (value: median, with its spread):", ""]
    goal_checks = [
        {**c, "label": f"{name}: {c['label']}"}
        for name, cmp in comps.items()
        for c in cmp["checks"]
        if c["goal"] is not None
    ]
    lines += _checks_table(goal_checks)
    if results.get("errors"):
        lines += ["", "Comparisons that failed in this run:", ""]
        lines += [f"- `{name}`: {err}" for name, err in results["errors"].items()]
    if FINDINGS.exists():
        lines += ["", FINDINGS.read_text().strip()]
    for name, cmp in comps.items():
        lines += ["", f"## {cmp['title']}", ""]
        if INTRO.get(name):
            lines += [INTRO[name], ""]
        other_run = cmp.get("command") and cmp["command"] != results["command"]
        lines.append(
            f"Measured {cmp['started']} in {cmp['seconds']:.0f} s; load average before "
            f"{cmp['load_before']}, after {cmp['load_after']}"
            + (f"; by `{cmp['command']}`" if other_run else "")
            + (f", commit {cmp['commit']}" if cmp.get("commit") else "")
            + (" (quick)" if cmp["quick"] else "")
            + ". Parameters: "
            + "; ".join(f"{k} = `{v}`" for k, v in cmp["params"].items())
            + "."
        )
        lines.append("")
        for plot in plots.get(name, []):
            lines += [f"![{name}]({folder.name}/{plot})", ""]
        lines += [*_checks_table(cmp["checks"]), ""]
        if name == "overhead" and cmp["series"].get("breakdown"):
            lines += [
                "Breakdown of the sinks' batches (medians, ms): phase 1 includes the write "
                "itself, which the plain writer also does.",
                "",
                "| batch | sink | plain writer | sink total | added | phase 1 | decision | "
                "phase 2 | rest |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for group, row in cmp["series"]["breakdown"].items():
                for kind, d in row.items():
                    ph = d["phases_ms"]
                    lines.append(
                        f"| {group} | {kind} | {_num(d['baseline_ms'])} | {_num(d['total_ms'])} | "
                        f"{_num(d['added_ms'])} | {_num(ph.get('phase1'))} | "
                        f"{_num(ph.get('decision'))} | {_num(ph.get('phase2'))} | "
                        f"{_num(ph.get('other'))} |"
                    )
            lines.append("")
        if name == "scaling" and "batches" in cmp["series"]:
            lines += [
                "| protocol | batches | wall time | slope | coordinator log files at the end | "
                "marker rows at the end |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            for protocol, d in cmp["series"]["batches"].items():
                lines.append(
                    f"| {protocol} | {d['batches']:,} | {d['wall_seconds']:.0f} s | "
                    f"{d['slope_ms_per_1000_batches']:+.2f} ms per 1,000 batches | "
                    f"{d['log_files_at_end']} | "
                    f"{'-' if d['marker_rows_at_end'] is None else d['marker_rows_at_end']} |"
                )
            lines.append("")
        lines += ["<details><summary>All measurements</summary>", ""]
        lines += _measure_table(cmp["measurements"])
        lines += ["", "</details>", ""]
        for note in cmp["notes"]:
            lines += [f"*{note}*", ""]
    lines += [
        "## Reproducing",
        "",
        "```bash",
        "bash scripts/setup.sh            # once: Java, Maven, PostgreSQL and MariaDB, .venv",
        "scripts/bench.sh                 # all comparisons: ~25 min on 2 cores",
        "scripts/bench.sh --only overhead # one comparison; the others stay from the last run",
        "scripts/bench.sh --wait-quiet 45 # wait up to 45 min for a load average < 1 first",
        "scripts/bench.sh --quick --out /tmp/bench   # smoke test (< 5 min), elsewhere",
        "```",
        "",
        "The suite starts its own Kafka broker, a durable PostgreSQL cluster, a durable MariaDB "
        "server and a `local[2]` Spark session, and stops them at the end. The code is in "
        "`benchmarks/` (one "
        "`bench_<name>.py` per comparison, `run.py` drives them, `bench_report.py` writes this "
        "page); every sample is in `benchmarks/results.json`.",
        "",
    ]
    report.write_text("\n".join(lines))
