"""The documentation names only what exists: twophase's names, and the extras of the package.

Every page of ``docs/`` and ``README.md`` is read as text (no Spark, no server):

- every qualified name ``twophase.X[.Y...]`` in backticks, or in a fenced code block, must
  resolve by import (or be the name of one of twophase's loggers, such as
  ``twophase.metrics``); so must ``MODULE:CALLABLE`` targets of the ``twophase`` command;
- every ``from twophase... import a, b`` in a code block must import;
- every extra in ``twophase[a,b]`` (or ``twophase-*.whl[a,b]``) must be an extra of
  ``pyproject.toml``;
- the tables of facts that live in the code (the extras, the error classes) are asked for by
  their pages and rendered from the code (``scripts/docs_tables.py``), never copied.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]

#: A fenced code block (``` or ~~~), its body in group 2.
_FENCE = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)
#: An inline code span: its body in group 2 (CommonMark: as many backticks close as open).
_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
#: ``twophase.a.b`` not inside a longer word or path (``tools/twophase_dev``, ``x.twophase.y``).
_QUALIFIED = re.compile(r"(?<![\w./-])twophase(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
#: ``twophase.connectors.jdbc:postgres_sink`` (the ``--target`` of the command, entry points).
_TARGET = re.compile(
    r"(?<![\w./-])(twophase(?:\.[A-Za-z_][A-Za-z0-9_]*)*):([A-Za-z_][A-Za-z0-9_]*)"
)
#: ``from twophase.x import a, b`` or ``from twophase import (a, b)``.
_FROM_IMPORT = re.compile(
    r"^[ \t]*(?:>>>[ \t]*)?from[ \t]+(twophase(?:\.[A-Za-z_][A-Za-z0-9_]*)*)[ \t]+import[ \t]+"
    r"(\([^)]*\)|[^\n#]+)",
    re.M,
)
#: ``twophase[a,b]`` and ``twophase-0.3.0-py3-none-any.whl[a,b]``.
_EXTRAS = re.compile(r"(?:(?<![\w-])twophase|\.whl)\[([A-Za-z0-9_, -]*)\]")


def _strip_fences(text: str) -> str:
    return _FENCE.sub("", text)


def _code(text: str) -> list[str]:
    """Return the bodies of the page's fenced blocks and inline code spans."""
    blocks = [m.group(2) for m in _FENCE.finditer(text)]
    spans = [m.group(2) for m in _SPAN.finditer(_strip_fences(text))]
    return blocks + spans


def _line(text: str, needle: str) -> int:
    index = text.find(needle)
    return text.count("\n", 0, index) + 1 if index >= 0 else 0


@cache
def _loggers() -> frozenset[str]:
    """The loggers twophase's sources name: ``getLogger("twophase....")``."""
    found = set()
    for folder in ("twophase", "connectors"):
        for path in (ROOT / folder).rglob("*.py"):
            found.update(re.findall(r"getLogger\(\s*[\"'](twophase[\w.]*)[\"']", path.read_text()))
    return frozenset(found)


@cache
def _metric_names() -> frozenset[str]:
    """The metrics twophase reports and their attributes (``twophase._metrics._otel``)."""
    from twophase._metrics._otel import ATTRIBUTES, METRICS

    return frozenset([*ATTRIBUTES, *(m.name for m in METRICS)])


_MISSING = object()


@cache
def _resolve(name: str) -> Any:
    """Import the longest module prefix of ``name`` and get the rest as attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            # Only "this very module does not exist" means: try a shorter prefix.
            if exc.name is not None and not ".".join(parts[:cut]).startswith(exc.name):
                raise
            continue
        for attr in parts[cut:]:
            value = getattr(value, attr, _MISSING)
            if value is _MISSING:
                return _MISSING
        return value
    return _MISSING


@cache
def _record_headers() -> frozenset[str]:
    """The headers of the Kafka connector's dead-letter records."""
    from twophase.connectors.kafka._dead_letters import HEADER_NAMES

    return frozenset(HEADER_NAMES)


def _exists(name: str) -> bool:
    return (
        name in _loggers()
        or name in _metric_names()
        or name in _record_headers()
        or _resolve(name) is not _MISSING
    )


@cache
def _extras() -> frozenset[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return frozenset(project["optional-dependencies"])


def _imported_names(clause: str) -> list[str]:
    clause = clause.strip().strip("()")
    names = []
    for part in clause.replace("\n", " ").split(","):
        words = part.split("#")[0].split()
        if words and words[0] != "*" and re.fullmatch(r"[A-Za-z_]\w*", words[0]):
            names.append(words[0])
    return names


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_twophase_name_a_page_gives_exists(page: Path) -> None:
    text = page.read_text()
    wrong = []
    for code in _code(text):
        for name in _QUALIFIED.findall(code):
            if not _exists(name):
                wrong.append(f"line {_line(text, name)}: `{name}` does not resolve")
        for module, attr in _TARGET.findall(code):
            if not _exists(f"{module}.{attr}"):
                where = _line(text, f"{module}:{attr}")
                wrong.append(f"line {where}: `{module}:{attr}` does not resolve")
        for module, clause in _FROM_IMPORT.findall(code):
            for attr in _imported_names(clause):
                if not _exists(f"{module}.{attr}"):
                    wrong.append(f"line {_line(text, attr)}: `from {module} import {attr}` fails")
    assert not wrong, f"{_page_id(page)} names what twophase does not have:\n" + "\n".join(wrong)


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_extra_a_page_installs_exists(page: Path) -> None:
    text = page.read_text()
    wrong = []
    for match in _EXTRAS.finditer(text):
        for extra in (e.strip() for e in match.group(1).split(",")):
            if extra not in _extras():
                where = text.count("\n", 0, match.start()) + 1
                wrong.append(f"line {where}: {match.group(0)}: no extra {extra!r}")
    assert not wrong, (
        f"{_page_id(page)} installs extras pyproject.toml does not define "
        f"({', '.join(sorted(_extras()))}):\n" + "\n".join(wrong)
    )


def test_the_checks_find_what_they_look_for() -> None:
    """The patterns and the resolver, on names that exist and names that do not."""
    page = (
        "Use `twophase.write_stream(df, sink)` and `twophase.connectors.jdbc.postgres_sink`, log\n"
        "on `twophase.metrics`, run `--target twophase.connectors.kafka:KafkaSink`,\n"
        "not `twophase.no_such_thing` nor `twophase.errors.NoSuchError`; paths like\n"
        "`tools/twophase_dev/` and `twophase/_stores/_store.py` are no names.\n\n"
        "```python\nfrom twophase.testing import (\n    TwoPhaseSinkContract,\n    Nope,\n)\n```\n"
        "```bash\npip install 'twophase[kafka,jdbc]' 'twophase[nope]'\n```\n"
    )
    names = [n for code in _code(page) for n in _QUALIFIED.findall(code)]
    assert [n for n in names if not _exists(n)] == [
        "twophase.no_such_thing",
        "twophase.errors.NoSuchError",
    ]
    assert {"twophase.write_stream", "twophase.metrics"} <= set(names)
    targets = [t for code in _code(page) for t in _TARGET.findall(code)]
    assert targets == [("twophase.connectors.kafka", "KafkaSink")]
    assert all(_exists(f"{m}.{a}") for m, a in targets)
    imports = [
        (module, attr)
        for code in _code(page)
        for module, clause in _FROM_IMPORT.findall(code)
        for attr in _imported_names(clause)
    ]
    assert imports == [("twophase.testing", "TwoPhaseSinkContract"), ("twophase.testing", "Nope")]
    assert [_exists(f"{m}.{a}") for m, a in imports] == [True, False]
    extras = [e.strip() for m in _EXTRAS.finditer(page) for e in m.group(1).split(",")]
    assert extras == ["kafka", "jdbc", "nope"]
    assert "nope" not in _extras()
    assert {"kafka", "jdbc", "mariadb", "all"} <= _extras()


def _docs_tables() -> Any:
    spec = importlib.util.spec_from_file_location(
        "docs_tables", ROOT / "scripts" / "docs_tables.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("page", "table"),
    [
        ("index.md", "extras"),
        ("operations.md", "errors"),
        ("operations.md", "cli-usage"),
        ("storage.md", "schemes"),
        ("jdbc.md", "options-postgres"),
        ("mariadb.md", "options-mariadb"),
        ("kafka.md", "options-kafka"),
        ("monitoring.md", "metrics"),
        ("development.md", "code-map"),
    ],
)
def test_the_tables_of_facts_are_rendered_from_the_code_not_copied(page: str, table: str) -> None:
    """The extras, the error classes, the command's usage: a page asks, the site renders it.

    The renderer refuses a description table that does not name exactly what the code has (an
    extra of pyproject.toml, an error class of twophase.errors), so a new extra or error class
    without a line in the docs fails here.
    """
    tables = _docs_tables()
    text = (ROOT / "docs" / page).read_text()
    assert f"<!-- table: {table} -->" in text, f"docs/{page} copies the {table} table by hand"
    rendered = tables.render(text, page)
    assert "<!-- table:" not in rendered
    if table == "extras":
        for extra in tables.extras():
            assert f"| `{extra}` |" in rendered, extra
    elif table == "schemes":
        for scheme in tables.object_store_schemes():
            assert f"`{scheme}://`" in rendered, scheme
    elif table.startswith("options-"):
        options = tables.options_table(table)
        assert options in rendered
        for name in tables.signature_options(tables.factory(table)):
            assert f"`{name}`" in options, name
    elif table == "metrics":
        from twophase._metrics._otel import METRICS

        for metric in METRICS:
            assert f"| `{metric.name}`<br>`{metric.prometheus_name}` |" in rendered, metric.name
    elif table == "code-map":
        for module in (ROOT / "twophase").rglob("*.py"):
            where = module.relative_to(ROOT / "twophase")
            if where.parts[0] == "connectors":  # a checkout's link to connectors/, if any
                continue
            if len(where.parts) == 1:
                assert f"| `twophase/{where}` |" in rendered, where
            else:
                assert f"| **`twophase/{where.parts[0]}/`** |" in rendered, where
                if module.name != "__init__.py":
                    assert f"| | `{module.name}` |" in rendered, where
    elif table == "cli-usage":
        for command in tables.COMMANDS:
            assert f"usage: twophase {command} [-h]" in rendered, command
        assert rendered.count("--query-id") >= 3
    else:
        import twophase.errors

        for name in twophase.errors.__all__:
            if name != "find_error":
                assert f"| `{name}` |" in rendered, name


def test_the_code_map_refuses_a_room_on_no_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    """A room of twophase/ missing from the core-layers contract fails the site's build."""
    tables = _docs_tables()
    floors = tables.core_floors()
    assert len(floors) <= 8, "the core stands on at most 8 import floors"
    assert sum(len(floor) for floor in floors) <= 17, "the core has at most 17 rooms"
    monkeypatch.setattr(
        tables, "core_floors", lambda: [*floors[:-1], ["errors", "_values", "_arrow"]]
    )
    with pytest.raises(ValueError, match=r"on no floor \['_version'\]"):
        tables.code_map()


def test_every_table_a_page_asks_for_exists() -> None:
    tables = _docs_tables()
    for page in PAGES:
        tables.render(page.read_text(), str(page.relative_to(ROOT)))  # raises on an unknown name


def test_a_description_table_that_falls_behind_the_code_is_refused() -> None:
    tables = _docs_tables()
    with pytest.raises(ValueError, match=r"extras of pyproject.toml without a description \['x'\]"):
        tables._same_names("extras of pyproject.toml", {"x": 1}, "EXTRA_PURPOSE", {})


def test_a_factory_option_without_a_description_is_refused() -> None:
    """The options tables name exactly the signature's options (a new option needs its text)."""
    tables = _docs_tables()

    def sink(name: str, *, table: str, undocumented: int = 1) -> None:
        """Build.

        Parameters
        ----------
        name, table
            Described together.
        gone
            An option the signature lost.
        """

    tables.FACTORIES["options-test"] = (__name__, "sink")
    globals()["sink"] = sink
    try:
        with pytest.raises(ValueError, match=r"without a description \['undocumented'\]"):
            tables.options("options-test")
        with pytest.raises(ValueError, match=r"descriptions of nothing \['gone'\]"):
            tables.options("options-test")
    finally:
        del tables.FACTORIES["options-test"]
        del globals()["sink"]


#: Schemes a page may name that are no store of the log: web addresses, DSNs, Spark masters, and
#: the file systems that only Spark's ``CheckpointFileManager`` serves (the "any other" row).
_NOT_LOG_STORES = frozenset(
    {"http", "https", "postgresql", "mysql", "mariadb", "sc", "spark", "hdfs", "adl", "dbfs"}
)
_URI_SCHEME = re.compile(r"(?<![\w+.-])([a-z][a-z0-9+.-]*)://")


def _scheme_problems(text: str) -> list[str]:
    """Schemes the code lacks, and lists of object stores that leave one out."""
    tables = _docs_tables()
    stores = tables.object_store_schemes()
    known = {*stores, "file", *_NOT_LOG_STORES}
    wrong = [
        f"line {_line(text, m.group(0))}: {m.group(0)}"
        for m in _URI_SCHEME.finditer(text)
        if m.group(1) not in known
    ]
    for block in re.split(r"\n\s*\n|\n(?=\|)", _strip_fences(text)):
        named = {m.group(1) for m in _URI_SCHEME.finditer(block)} & set(stores)
        services = {tables.object_store_of(scheme) for scheme in named}
        missing = {tables.object_store_of(scheme) for scheme in stores} - services
        if len(services) >= 2 and missing and "storage.md" not in block:
            where = _line(text, block.strip()[:60])
            wrong.append(f"line {where}: a list of object stores without {sorted(missing)}")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_scheme_a_page_names_is_served_and_lists_name_them_all(page: Path) -> None:
    """No page names a scheme twophase lacks; a list of the object stores' schemes lists all.

    A paragraph or table row naming schemes of two or more object stores is a list of them: it
    names a scheme of every object store, or links to storage.md, whose table is rendered from the
    stores' own map. A store added to the code then fails every list that predates it.
    """
    wrong = _scheme_problems(page.read_text())
    assert not wrong, f"{_page_id(page)}:\n" + "\n".join(wrong)


def test_the_scheme_check_finds_what_it_looks_for() -> None:
    assert _scheme_problems("S3 only: `s3://b/p` or `s3a://b/p`.\n\nAt `hdfs://nn/p`.") == []
    assert _scheme_problems("On `s3://b`, `gs://b` or `abfss://c@a/p`.") == []
    assert _scheme_problems("On `s3://b` or `gs://b` ([Storage](storage.md)).") == []
    assert _scheme_problems("On `s3://b` or `gs://b`.") == [
        "line 1: a list of object stores without ['Azure Blob Storage']"
    ]
    assert _scheme_problems("Or `gcs://b`.") == ["line 1: gcs://"]


def _installs_choices(text: str) -> bool:
    """Whether the page explains installing: a code block with two or more install lines."""
    return any(
        len(re.findall(r"pip install[^\n]*twophase\[", m.group(2))) >= 2
        for m in _FENCE.finditer(text)
    )


@pytest.mark.parametrize(
    "page", [p for p in PAGES if _installs_choices(p.read_text())], ids=_page_id
)
def test_a_page_that_explains_installing_names_every_extra(page: Path) -> None:
    """The pages with a choice of install lines name every extra a user picks from, or render them.

    A store's extra left out is how a user gets the weaker store silently, so the pages that
    explain which extras to install cannot fall behind pyproject.toml.
    """
    text = page.read_text()
    if "<!-- table: extras -->" in text:
        return
    missing = [e for e in sorted(_extras() - {"dev"}) if f"`{e}`" not in _strip_fences(text)]
    assert not missing, f"{_page_id(page)} explains installing but never names {missing}"


def test_pages_that_explain_installing_are_found() -> None:
    found = {_page_id(p) for p in PAGES if _installs_choices(p.read_text())}
    assert {"README.md", "docs/index.md", "docs/quickstart.md", "docs/deployment.md"} <= found


#: A call of a connector's factory in a code block, up to its closing parenthesis.
_FACTORY_CALL = re.compile(r"\b(postgres_sink|mariadb_sink|KafkaSink)\(")


def _call_keywords(code: str, start: int) -> list[str]:
    depth, end = 0, start
    for end in range(start, len(code)):
        depth += {"(": 1, ")": -1}.get(code[end], 0)
        if depth == 0:
            break
    inner = code[start + 1 : end]
    flat = re.sub(r"\([^()]*\)|\[[^\[\]]*\]|\{[^{}]*\}|\"[^\"]*\"|'[^']*'", "", inner)
    return re.findall(r"(?:^|,)\s*([A-Za-z_]\w*)\s*=(?!=)", flat)


def _accepts(factory: str, keyword: str) -> bool:
    tables = _docs_tables()
    table = {"postgres_sink": "options-postgres", "mariadb_sink": "options-mariadb"}.get(
        factory, "options-kafka"
    )
    if keyword in tables.signature_options(tables.factory(table)):
        return True
    if factory == "postgres_sink":  # any libpq keyword: libpq itself says which
        from psycopg2.extensions import parse_dsn

        try:
            parse_dsn(f"{keyword}=x")
        except Exception:
            return False
        return True
    if factory == "mariadb_sink":  # its connection keywords: the factory refuses others by name
        from twophase.connectors.jdbc import mariadb_sink
        from twophase.errors import ConfigurationError

        try:
            mariadb_sink("n", table="t", url="mysql://u@h/d", **{keyword: "1"})
        except ConfigurationError as exc:
            return exc.setting != keyword and keyword not in str(exc)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_option_a_page_passes_to_a_factory_exists(page: Path) -> None:
    text = page.read_text()
    wrong = []
    for code in _code(text):
        for call in _FACTORY_CALL.finditer(code):
            for keyword in _call_keywords(code, call.end() - 1):
                if not _accepts(call.group(1), keyword):
                    wrong.append(f"line {_line(text, keyword + '=')}: {call.group(1)}({keyword}=)")
    assert not wrong, f"{_page_id(page)} passes options the factories lack:\n" + "\n".join(wrong)


def test_the_option_check_finds_what_it_looks_for() -> None:
    code = 'postgres_sink("a", table=t(1, 2), dsn="x=1", sslmode="require", nope=1, f=g(h=1))'
    keywords = _call_keywords(code, code.index("("))
    assert keywords == ["table", "dsn", "sslmode", "nope", "f"]
    assert [_accepts("postgres_sink", k) for k in keywords] == [True, True, True, False, False]
    assert _accepts("mariadb_sink", "ssl_ca")
    assert not _accepts("mariadb_sink", "sslmode")
    assert _accepts("KafkaSink", "producer_lanes")
    assert not _accepts("KafkaSink", "lanes")
