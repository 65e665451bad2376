"""Building a sink from a factory's keywords: written once for every database of the family.

A database's public factory (``postgres_sink``, ``mariadb_sink``) is a typed
signature and a docstring; it hands its keywords to :func:`build_sink`, which
splits them into the sink's options (:class:`SinkOptions`, plus the dialect's
own) and the client library's connection keywords, refuses an unknown keyword
by name (with the closest valid one), builds the :class:`~._options.JdbcOptions`
and the :class:`~._config.ConnectionConfig`, asks the dialect which protocol
``protocol="auto"`` means on this server, and builds the sink of that protocol.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypedDict, TypeVar

from twophase import RetryPolicy
from twophase.errors import ConfigurationError

from .._settings import refuse_unknown
from ._config import ConnectionConfig
from ._options import BadRows, JdbcOptions, QualifiedName, SchemaEvolution, WriteMode

if TYPE_CHECKING:
    from ._sink import JdbcMarkerSink, JdbcTwoPhaseSink

__all__ = [
    "DEFAULTS",
    "PROTOCOLS",
    "Choice",
    "CommitProtocolName",
    "FactoryDialect",
    "SinkClasses",
    "SinkOptions",
    "build_sink",
    "options_signature",
]

_log = logging.getLogger("twophase.connectors.jdbc")

#: The ``protocol`` argument of every factory.
CommitProtocolName = Literal["auto", "coordinated", "markers"]
PROTOCOLS: tuple[str, ...] = ("auto", "coordinated", "markers")


class SinkOptions(TypedDict, total=False):
    """The keyword options every database's factory takes (documented on each factory)."""

    mode: WriteMode
    key_columns: Sequence[str]
    cdc_op_column: str
    order_column: str | None
    protocol: CommitProtocolName
    create_table: bool
    schema_evolution: SchemaEvolution
    bad_rows: BadRows
    dead_letter_table: str | tuple[str, str] | None
    max_bad_rows: int
    marker_table: str | tuple[str, str]
    marker_retention: int
    lock_timeout: float
    statement_timeout: float
    idle_in_transaction_timeout: float
    connect_timeout: int
    network_timeout: float
    max_partitions: int | None
    staging: bool
    checkpoint_location: str | None
    retry: RetryPolicy | None


#: Every keyword of :class:`SinkOptions`, and those that are not
#: :class:`~._options.JdbcOptions` fields but the sink's own.
_FACTORY_KEYWORDS = frozenset(SinkOptions.__annotations__)
_OPTION_FIELDS = _FACTORY_KEYWORDS - {"protocol", "staging", "checkpoint_location", "retry"}


@dataclass(frozen=True)
class Choice:
    """What ``protocol`` means for one sink on one server.

    Attributes
    ----------
    protocol
        ``"coordinated"`` or ``"markers"``.
    why
        Why, for the log line (``"max_prepared_transactions=0"``).
    max_transactions
        Coordinated: the partitions one batch may have, when known now.
    """

    protocol: Literal["coordinated", "markers"]
    why: str
    max_transactions: int | None = None


class FactoryDialect(Protocol):
    """What :func:`build_sink` asks of a database (its dialect object)."""

    @property
    def name(self) -> str:
        """The database's name (``"PostgreSQL"``)."""
        ...

    @property
    def max_identifier_bytes(self) -> int:
        """The longest identifier the server keeps whole, in bytes."""
        ...

    @property
    def sink_options(self) -> frozenset[str]:
        """The factory options of this database only (``{"merge_schema"}``)."""
        ...

    @property
    def connection_keywords(self) -> frozenset[str]:
        """The client library's usual connection keywords, to name the closest to a typo."""
        ...

    def connection(self, target: str | None, keywords: Mapping[str, object]) -> ConnectionConfig:
        """Parse the connection string (``target``) and merge the keywords into it."""
        ...

    def accepts_keyword(self, keyword: str) -> bool:
        """Tell whether the client library takes ``keyword`` as a connection keyword."""
        ...

    def application_name(self, sink: str) -> str | None:
        """Return the sessions' application name, where the database keeps one."""
        ...

    def choose(
        self, requested: str, options: JdbcOptions, connection: ConnectionConfig, sink: str
    ) -> Choice:
        """Return which protocol ``requested`` (``"auto"`` or one pinned) means here."""
        ...


#: What a factory's options default to (those of :class:`~._options.JdbcOptions`, and the sink's).
DEFAULTS: dict[str, Any] = {
    **{f.name: f.default for f in dataclasses.fields(JdbcOptions) if f.name in _OPTION_FIELDS},
    "marker_table": "twophase_markers",
    "protocol": "auto",
    "staging": False,
    "checkpoint_location": None,
    "retry": None,
}

FactoryT = TypeVar("FactoryT", bound=Callable[..., Any])


def options_signature(*own: str) -> Callable[[FactoryT], FactoryT]:
    """Give a factory the signature its options spell, for ``help()``, IDEs and the docs.

    A factory is typed ``(name, *, table, <connection string>, **options:
    Unpack[...])``; its signature as Python shows it lists every option with
    its default (:data:`DEFAULTS`), then ``**connect_params`` (the client
    library's keywords), as a hand-written signature would.

    Parameters
    ----------
    *own
        The database's own options, in the order its docstring has them (they
        default to :data:`DEFAULTS`' value or None).

    Returns
    -------
    callable
        A decorator that sets ``__signature__``.
    """

    def decorate(factory: FactoryT) -> FactoryT:
        given = list(inspect.signature(factory).parameters.values())[:-1]  # without **options
        hints = {
            key: getattr(hint, "__forward_arg__", hint)  # a TypedDict keeps ForwardRefs
            for key, hint in {**SinkOptions.__annotations__, **factory.__annotations__}.items()
        }
        options = [
            inspect.Parameter(
                key,
                inspect.Parameter.KEYWORD_ONLY,
                default=DEFAULTS.get(key),
                annotation=hints.get(key, inspect.Parameter.empty),
            )
            for key in (*SinkOptions.__annotations__, *own)
        ]
        rest = inspect.Parameter("connect_params", inspect.Parameter.VAR_KEYWORD)
        factory.__signature__ = inspect.signature(factory).replace(  # type: ignore[attr-defined]
            parameters=[*given, *options, rest]
        )
        return factory

    return decorate


TwoPhaseT = TypeVar("TwoPhaseT", bound="JdbcTwoPhaseSink[Any, Any]")
MarkerT = TypeVar("MarkerT", bound="JdbcMarkerSink[Any]")


@dataclass(frozen=True)
class SinkClasses(Generic[TwoPhaseT, MarkerT]):
    """A database's two sink classes, one per protocol.

    Attributes
    ----------
    coordinated
        The sink of the coordinated protocol.
    markers
        The sink of the markers protocol.
    """

    coordinated: type[TwoPhaseT]
    markers: type[MarkerT]


def build_sink(
    dialect: FactoryDialect,
    classes: SinkClasses[TwoPhaseT, MarkerT],
    name: str,
    table: str | tuple[str, str],
    target: str | None,
    keywords: Mapping[str, Any],
) -> TwoPhaseT | MarkerT:
    """Build a database's sink from its factory's arguments.

    Parameters
    ----------
    dialect
        The database.
    classes
        Its sink classes.
    name
        The sink name (errors name it).
    table
        The target table.
    target
        The connection string (a DSN, a URL), if given.
    keywords
        Every other keyword the factory got: :class:`SinkOptions`, the
        dialect's own options and the client library's connection keywords.

    Returns
    -------
    JdbcTwoPhaseSink or JdbcMarkerSink
        The sink of the protocol the dialect chose.

    Raises
    ------
    ConfigurationError
        An unknown keyword (naming it and the closest valid one), an invalid
        option or ``protocol``, or a protocol the server cannot run.
    """
    own = _OPTION_FIELDS | dialect.sink_options
    factory = own | _FACTORY_KEYWORDS
    connect = {k: v for k, v in keywords.items() if k not in factory}
    unknown = [k for k in connect if not dialect.accepts_keyword(k)]
    refuse_unknown(f"{dialect.name} sink", name, unknown, factory | dialect.connection_keywords)
    protocol = keywords.get("protocol", "auto")
    if protocol not in PROTOCOLS:
        raise ConfigurationError(
            f"protocol must be 'auto', 'coordinated' or 'markers'; got {protocol!r}",
            setting="protocol",
            sink=name,
        )
    given = {k: v for k, v in keywords.items() if k in own}
    try:
        for setting in ("marker_table", "dead_letter_table"):
            if given.get(setting) is not None:
                given[setting] = QualifiedName.parse(given[setting], setting)
        if "key_columns" in given:
            given["key_columns"] = tuple(given["key_columns"])
        application = dialect.application_name(name)
        if application is not None:
            given["application_name"] = application
        options = JdbcOptions(
            table=QualifiedName.parse(table, "table"),
            database=dialect.name,
            max_identifier_bytes=dialect.max_identifier_bytes,
            **given,
        )
    except ConfigurationError as exc:
        raise exc.with_context(sink=name) from None
    try:
        connection = dialect.connection(target, connect)
    except ConfigurationError as exc:
        raise exc.with_context(sink=name) from None
    choice = dialect.choose(protocol, options, connection, name)
    _log.info(
        "sink %s: protocol '%s' (%s) on %s",
        name,
        choice.protocol,
        choice.why,
        connection.describe(),
    )
    staging = bool(keywords.get("staging", False))
    checkpoint_location = keywords.get("checkpoint_location")
    retry = keywords.get("retry")
    if choice.protocol == "markers":
        return classes.markers(
            name,
            options,
            connection,
            staging=staging,
            checkpoint_location=checkpoint_location,
            retry=retry,
        )
    if staging:
        _log.info("sink %s: staging=True has no effect with protocol 'coordinated'", name)
    sink = classes.coordinated(
        name, options, connection, checkpoint_location=checkpoint_location, retry=retry
    )
    if choice.max_transactions is not None:
        sink.max_transactions_per_batch = choice.max_transactions
    return sink
