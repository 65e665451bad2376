"""Every database's factory: keywords split, checked and refused by name before any connection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from twophase.connectors.jdbc import PostgresMarkerSink, mariadb_sink, postgres_sink
from twophase.errors import ConfigurationError, RetriableError

pytestmark = pytest.mark.unit

FACTORIES: list[tuple[Callable[..., Any], dict[str, str]]] = [
    (postgres_sink, {"dsn": "host=db.invalid"}),
    (mariadb_sink, {"url": "mysql://etl@db.invalid/shop"}),
]


@pytest.mark.parametrize(("factory", "target"), FACTORIES)
@pytest.mark.parametrize(
    ("keyword", "value", "closest"),
    [
        ("bad_row", "dead_letter", "bad_rows"),  # a misspelt option, as a typo would be
        ("lock_timout", 3.0, "lock_timeout"),
        ("marker_tabel", "m", "marker_table"),
    ],
)
def test_an_unknown_keyword_is_refused_by_name_when_the_sink_is_built(
    factory: Callable[..., Any],
    target: dict[str, str],
    keyword: str,
    value: object,
    closest: str | None,
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        factory("orders", table="t", protocol="markers", **target, **{keyword: value})
    error = caught.value
    assert not isinstance(error, RetriableError)
    assert (error.sink, error.setting) == ("orders", keyword)
    assert f"unknown keyword argument {keyword!r}" in error.message
    if closest is None:
        assert "did you mean" not in error.message
    else:
        assert f"did you mean {closest!r}?" in error.message


def test_a_libpq_keyword_outside_the_usual_list_is_asked_of_libpq() -> None:
    # fallback_application_name is libpq's, and not in the list used for suggestions.
    sink = postgres_sink(
        "orders",
        table="t",
        dsn="host=db.invalid",
        protocol="markers",
        fallback_application_name="etl",
        sslmode="require",
    )
    assert isinstance(sink, PostgresMarkerSink)
    with pytest.raises(ConfigurationError, match="'sslmod'; did you mean 'sslmode'"):
        postgres_sink("orders", table="t", dsn="host=db.invalid", protocol="markers", sslmod="x")


@pytest.mark.parametrize(("factory", "target"), FACTORIES)
def test_a_pinned_markers_protocol_is_built_without_connecting(
    factory: Callable[..., Any], target: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", "twophase.connectors.jdbc")
    sink = factory("orders", table=("shop", "orders"), protocol="markers", staging=True, **target)
    assert sink.protocol.value == "markers"
    assert sink.staging is True
    assert sink.options.table.parts() == ("shop", "orders")
    assert "protocol 'markers' (forced)" in caplog.text


def test_an_invalid_protocol_names_the_setting_and_the_sink() -> None:
    with pytest.raises(ConfigurationError, match="protocol must be") as caught:
        mariadb_sink("orders", table="t", url="mysql://etl@db.invalid/x", protocol="xa")  # type: ignore[typeddict-item]
    assert (caught.value.sink, caught.value.setting) == ("orders", "protocol")


@pytest.mark.parametrize(("factory", "target"), FACTORIES)
def test_the_signature_python_shows_lists_every_option_with_the_default_it_takes(
    factory: Callable[..., Any], target: dict[str, str]
) -> None:
    import inspect

    from twophase.connectors.jdbc._factory import SinkOptions

    parameters = inspect.signature(factory).parameters
    assert set(SinkOptions.__annotations__) <= set(parameters)
    assert list(parameters)[-1] == "connect_params"
    options = factory("orders", table="t", protocol="markers", **target).options
    for name in ("mode", "cdc_op_column", "create_table", "marker_retention", "lock_timeout"):
        assert parameters[name].default == getattr(options, name), name
    assert parameters["marker_table"].default == str(options.marker_table)
    assert parameters["protocol"].default == "auto"
    assert parameters["lock_timeout"].annotation == "float"
