"""Tables of the documentation rendered from the code, so that no page copies a fact by hand.

A page asks for a table with an HTML comment on a line of its own, ``<!-- table: NAME -->``;
the site's hook (``scripts/mkdocs_hooks.py``) replaces it when the site builds, and
``tests/test_docs_names.py`` checks that every table renders and that the pages ask for them.

- ``extras``: every extra of ``pyproject.toml``, the packages it installs, and what it is for.
- ``cli-usage``: the ``--help`` of each command of ``twophase``, run when the site builds.
- ``metrics``: every metric twophase reports (``twophase._metrics._otel.METRICS``): its
  OpenTelemetry and Prometheus names, kind, unit, attributes and meaning.
- ``errors``: every error class of :mod:`twophase.errors`, its bases, whether a restart alone
  can cure it (the class's ``restartable``), the first line of its docstring, and what to do.
- ``schemes``: every scheme a checkpoint location can have, the extra that installs its store,
  and the store each path writes the log with (from ``twophase._stores._store.OBJECT_STORES``).
- ``code-map``: every room of ``twophase/`` (a package or a module) on its import floor (the
  ``core-layers`` contract of ``pyproject.toml``), each package's modules, and the first line of
  each docstring: the map of the core cannot drift from the tree.
- ``options-postgres``, ``options-mariadb``, ``options-kafka``: each factory's options, their
  defaults (from its signature) and their meaning (from its docstring's Parameters section).
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

#: What each extra is for. An extra of pyproject.toml missing here, or a name here that is not an
#: extra, fails the site's build and the docs test: the table cannot fall behind the package.
EXTRA_PURPOSE = {
    "kafka": "`twophase.connectors.kafka`",
    "jdbc": "`twophase.connectors.jdbc`: PostgreSQL",
    "mariadb": "`twophase.connectors.jdbc`: MariaDB",
    "s3": "the coordinator log on `s3://` and `s3a://` through S3's conditional writes, on every "
    "path ([Storage](storage.md))",
    "gcs": "the coordinator log on `gs://` through GCS's conditional writes, on every path",
    "azure": "the coordinator log on `abfss://`, `abfs://`, `wasbs://` and `wasb://` through "
    "Azure Blob Storage's conditional writes, on every path",
    "spark": "PySpark, where nothing else brings Spark",
    "connect": "PySpark with its Spark Connect client ([Classic or Spark Connect](modes.md))",
    "otel": "exporting twophase's metrics where no application sets up OpenTelemetry (a Spark "
    "Connect server): the SDK, OTLP over HTTP, a Prometheus endpoint ([Monitoring](monitoring.md))",
    "all": "PySpark, every connector's and store's client and the metrics exporters: a machine "
    "of your own, never a platform that brings its own Spark",
    "dev": "the project's own tests, checks and documentation ([Development](development.md))",
}

_MARKER = re.compile(r"^<!-- table: ([a-z-]+) -->$", re.M)


def _package(requirement: str) -> str:
    """``pyspark[connect]>=3.5,<5`` -> ``pyspark[connect]``: the name and its extras."""
    return re.split(r"[<>=!~;\s]", requirement, maxsplit=1)[0]


def extras() -> dict[str, list[str]]:
    """Return each extra of ``pyproject.toml`` and the packages it installs (no versions)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = project["optional-dependencies"]
    return {name: [_package(r) for r in requirements] for name, requirements in found.items()}


def extras_table() -> str:
    """Render the extras table (``<!-- table: extras -->``).

    Raises
    ------
    ValueError
        An extra without a purpose in :data:`EXTRA_PURPOSE`, or a purpose of no extra.
    """
    found = extras()
    _same_names("extras of pyproject.toml", found, "EXTRA_PURPOSE", EXTRA_PURPOSE)
    rows = ["| extra | installs | for |", "|" + "---|" * 3]
    for name, packages in found.items():
        installs = "the tools in `pyproject.toml`" if name == "dev" else ", ".join(packages)
        rows.append(f"| `{name}` | {installs} | {EXTRA_PURPOSE[name]} |")
    return "\n".join(rows)


#: What a person does about each error class. A class of twophase.errors missing here, or a name
#: here that is no such class, fails the site's build and the docs test.
ERROR_ACTION = {
    "TwoPhaseError": "the base class: catch it to catch every twophase error, and look at "
    "`restartable`",
    "TransactionError": "a transient failure of the target; the batch's transactions were aborted "
    "or are recovered by the restart",
    "RetriableError": "as `TransactionError`",
    "AbortRequiredError": "as `TransactionError`",
    "CommitFailedError": "phase 2 gave up after its retries (the target down): the decision is "
    "durable; once the target is back, the restart finishes the batch first",
    "FatalError": "credentials, ACLs, a fenced producer or zombie: fix the cause first",
    "ConfigurationError": "fix the named setting or column; nothing was written",
    "UnsafeConfigurationError": "as `ConfigurationError` (for instance `spark.speculation=false`)",
    "DataError": "fix the data (filter, cast) or the table; the batch's transactions were aborted",
    "NondeterministicBatchError": "make the pipeline deterministic up to the sink, or "
    "`staging=True`; a batch that can never replay as it ran: `twophase resolve`",
    "ConcurrentQueryError": "stop the other run of the query: two queries must not share a "
    "checkpoint",
    "CoordinatorLogError": "a damaged log (`twophase status`), or a record of a newer release (run "
    "the release the message names, [Upgrading](upgrading.md))",
}


def errors_table() -> str:
    """Render the error classes table (``<!-- table: errors -->``).

    Raises
    ------
    ValueError
        A class without an action in :data:`ERROR_ACTION`, or an action of no class.
    """
    import twophase.errors as errors

    classes = {
        name: cls
        for name in errors.__all__
        if isinstance(cls := getattr(errors, name), type) and issubclass(cls, errors.TwoPhaseError)
    }
    _same_names("error classes of twophase.errors", classes, "ERROR_ACTION", ERROR_ACTION)
    rows = [
        "| class | is a | restart cures it | raised when | what to do |",
        "|---|---|---|---|---|",
    ]
    for name, cls in classes.items():
        bases = ", ".join(f"`{b.__name__}`" for b in cls.__bases__ if b is not Exception)
        summary = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        cures = "yes" if cls.restartable else "no"
        rows.append(
            f"| `{name}` | {bases or 'Exception'} | {cures} | {summary} | {ERROR_ACTION[name]} |"
        )
    return "\n".join(rows)


def _same_names(what: str, found: Iterable[str], table: str, described: dict[str, str]) -> None:
    """Refuse a table of descriptions that does not name exactly what the code has."""
    names = set(found)
    missing, unknown = names - described.keys(), described.keys() - names
    if missing or unknown:
        raise ValueError(
            f"scripts/docs_tables.py: {what} without a description {sorted(missing)}, "
            f"descriptions of nothing {sorted(unknown)}: make {table} match the code"
        )


#: The commands of ``twophase``, in the order the page explains them.
COMMANDS = ("status", "resolve", "abort-in-doubt", "dead-letters list", "dead-letters redrive")


def cli_usage() -> str:
    """Render each command's ``--help``, as the installed ``twophase`` prints it."""
    blocks = []
    for command in COMMANDS:
        done = subprocess.run(
            [sys.executable, "-m", "twophase", *command.split(), "--help"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "COLUMNS": "100"},
        )
        blocks.append(f"```text\n$ twophase {command} --help\n{done.stdout.rstrip()}\n```")
    return "\n\n".join(blocks)


def schemes_table() -> str:
    """Render the table of checkpoint locations and the store each path uses (``schemes``)."""
    from twophase._stores._store import OBJECT_STORES

    installs = extras()
    rows = [
        "| checkpoint location | extra | classic `foreachBatch` (the driver's JVM, py4j) "
        "| without the JVM (Spark Connect, `format(...)`, the `twophase` command) |",
        "|---|---|---|---|",
        "| `file:/...`, `file:///...` | | plain files | plain files |",
        "| a path without a scheme (`/chk/orders`) | | resolved against the cluster's "
        "`fs.defaultFS` first, as Spark resolves it (HDFS on EMR, DBFS on Databricks), then as "
        "in the other rows | the server's local disk, while Spark resolves it against "
        "`fs.defaultFS`: the two look in different places and the first batch fails; **always "
        "write the scheme** there |",
    ]
    for kind in OBJECT_STORES:
        schemes = ", ".join(f"`{scheme}://`" for scheme in kind.schemes)
        packages = ", ".join(installs[kind.extra])
        writes = f"{kind.service} conditional writes"
        rows.append(
            f"| {schemes} | `{kind.extra}` ({packages}) | {writes}; without the extra, "
            f"`CheckpointFileManager` | {writes}; without the extra, refused naming it |"
        )
    rows.append(
        "| `hdfs://`, `dbfs:`, `adl://`, any other | | Spark's `CheckpointFileManager` "
        "| **refused**, with a `ConfigurationError` |"
    )
    return "\n".join(rows)


def object_store_schemes() -> list[str]:
    """Every scheme an object store of twophase serves (``s3``, ``gs``, ``abfss``...)."""
    from twophase._stores._store import OBJECT_STORES

    return [scheme for kind in OBJECT_STORES for scheme in kind.schemes]


def object_store_of(scheme: str) -> str:
    """Return the service of an object-store scheme (``abfs`` -> ``Azure Blob Storage``)."""
    from twophase._stores._store import OBJECT_STORES

    return next(kind.service for kind in OBJECT_STORES if scheme in kind.schemes)


#: numpydoc's Sphinx roles (``:class:`~a.B```) and literals (````x````), to Markdown code.
_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj):`(~?)([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
#: ``docs/x.md`` in a docstring, a page of this site.
_PAGE = re.compile(r"`docs/([a-z-]+\.md)`")


def _markdown(text: str) -> str:
    """Render numpydoc text (one paragraph or several) as one line of Markdown."""

    def role(match: re.Match[str]) -> str:
        tilde, target = match.groups()
        return f"``{target.rsplit('.', 1)[-1] if tilde else target}``"

    text = _LITERAL.sub(r"`\1`", _ROLE.sub(role, text))
    text = _PAGE.sub(r"[\1](\1)", text)
    return " ".join(text.split()).replace("|", "\\|")


def parameters(obj: Any) -> dict[tuple[str, ...], str]:
    """Return the descriptions of a numpydoc ``Parameters`` section, by the names they describe.

    A line ``a, b`` describes both (one entry, two names); ``**kwargs`` keeps its stars.
    """
    doc = inspect.cleandoc(obj.__doc__ or "")
    section = re.search(r"^Parameters\n-+\n(.*?)(?=^\S[^\n]*\n-+\n|\Z)", doc, re.S | re.M)
    if section is None:
        return {}
    entries = re.findall(r"^(\S[^\n]*)\n((?:^(?:[ \t]+[^\n]*)?\n?)*)", section[1], re.M)
    return {tuple(n.strip() for n in names.split(",")): _markdown(body) for names, body in entries}


def _default(parameter: inspect.Parameter) -> str:
    if parameter.kind is inspect.Parameter.VAR_KEYWORD:
        return ""
    if parameter.default is inspect.Parameter.empty:
        return "required"
    if isinstance(parameter.default, str):
        return f'`"{parameter.default}"`'
    return f"`{parameter.default!r}`"


#: The factories whose options a page renders: table name -> (module, attribute).
FACTORIES = {
    "options-postgres": ("twophase.connectors.jdbc", "postgres_sink"),
    "options-mariadb": ("twophase.connectors.jdbc", "mariadb_sink"),
    "options-kafka": ("twophase.connectors.kafka", "KafkaSink"),
}


def factory(table: str) -> Any:
    """Import the factory (a function, or a class whose ``__init__`` takes the options)."""
    import importlib

    module, attribute = FACTORIES[table]
    return getattr(importlib.import_module(module), attribute)


def signature_options(built: Any) -> dict[str, inspect.Parameter]:
    """Return the options a factory takes, by name (``**connect_params`` with its stars)."""
    signature = inspect.signature(built.__init__ if inspect.isclass(built) else built)
    return {
        ("**" if p.kind is inspect.Parameter.VAR_KEYWORD else "") + name: p
        for name, p in signature.parameters.items()
        if name != "self"
    }


def options(table: str) -> list[tuple[tuple[str, ...], str, str]]:
    """Each option of a factory, in its docstring's order: names, defaults, meaning.

    Raises
    ------
    ValueError
        An option of the signature that the docstring does not describe, or a description of
        no option: the table cannot fall behind the code.
    """
    built = factory(table)
    given = signature_options(built)
    described = parameters(built)
    names = [name for group in described for name in group]
    _same_names(
        f"options of {built.__qualname__}", given, "its docstring", dict.fromkeys(names, "")
    )
    return [
        (group, " / ".join(_default(given[name]) for name in group), meaning)
        for group, meaning in described.items()
    ]


def options_table(table: str) -> str:
    """Render one factory's options (``options-postgres`` and the others)."""
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for group, defaults, meaning in options(table):
        names = ", ".join(f"`{name}`" for name in group)
        rows.append(f"| {names} | {defaults} | {meaning} |")
    return "\n".join(rows)


def metrics_table() -> str:
    """Render every metric twophase reports (``<!-- table: metrics -->``) from its definition."""
    from twophase._metrics._otel import ATTRIBUTES, METRICS

    rows = [
        "| metric (Prometheus name) | kind | unit | attributes | meaning |",
        "|---|---|---|---|---|",
    ]
    for metric in METRICS:
        attributes = ", ".join(f"`{a}`" for a in metric.attributes) or "--"
        rows.append(
            f"| `{metric.name}`<br>`{metric.prometheus_name}` | {metric.kind} | `{metric.unit}` "
            f"| {attributes} | {metric.description} |"
        )
    common = ", ".join(f"`{a}`" for a in ATTRIBUTES)
    return "\n".join(rows) + f"\n\nEvery metric also has the attributes {common}."


def _idea(path: Path) -> str:
    """Return the first line of a module's docstring (the module is parsed, not imported)."""
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    if not docstring:
        raise ValueError(f"{path.relative_to(ROOT)} has no docstring stating its idea")
    return _markdown(docstring.splitlines()[0])


def core_floors() -> list[list[str]]:
    """Return the rooms of ``twophase/`` by import floor, top first (``core-layers`` contract)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["id"] == "core-layers"]
    return [[room.strip() for room in layer.split("|")] for layer in contract["layers"]]


def code_map() -> str:
    """Every room of the core on its floor, each package's modules, and what each one is."""
    package = ROOT / "twophase"
    rooms = {
        path.name.removesuffix(".py")
        for path in package.iterdir()
        if (path.suffix == ".py" or (path / "__init__.py").is_file())
        and path.name != "__init__.py"
        and not path.is_symlink()
    }
    floors = core_floors()
    placed = {room for floor in floors for room in floor}
    if rooms != placed:
        raise ValueError(
            f"scripts/docs_tables.py: rooms of twophase/ on no floor {sorted(rooms - placed)}, "
            f"floors' rooms not in the tree {sorted(placed - rooms)}: fix the core-layers contract"
        )
    rows = [
        "| floor | room or module | its idea |",
        "|---|---|---|",
        f"| -- | `twophase/__init__.py` | {_idea(package / '__init__.py')} |",
    ]
    for number, floor in enumerate(floors, start=1):
        for room in sorted(floor):
            path = package / room
            if path.is_dir():
                idea = _idea(path / "__init__.py")
                rows.append(f"| {number} | **`twophase/{room}/`** | {idea} |")
                for module in sorted(path.glob("*.py")):
                    if module.name != "__init__.py":
                        rows.append(f"| | `{module.name}` | {_idea(module)} |")
            else:
                idea = _idea(path.with_suffix(".py"))
                rows.append(f"| {number} | `twophase/{room}.py` | {idea} |")
    return "\n".join(rows)


TABLES: dict[str, Callable[[], str]] = {
    "code-map": code_map,
    "extras": extras_table,
    "metrics": metrics_table,
    "errors": errors_table,
    "cli-usage": cli_usage,
    "schemes": schemes_table,
    **{name: partial(options_table, name) for name in FACTORIES},
}


def render(markdown: str, page: str = "") -> str:
    """Replace every ``<!-- table: NAME -->`` line of a page with its table.

    Raises
    ------
    ValueError
        A marker names no table.
    """

    def table(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in TABLES:
            raise ValueError(f"{page}: no table named {name!r} (scripts/docs_tables.py)")
        return TABLES[name]()

    return _MARKER.sub(table, markdown)
