"""The pipelined COPY stream, with a fake connection (no server)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from twophase.connectors.jdbc._postgres._copy import CopyAbortedError, CopyStream

pytestmark = pytest.mark.unit


class FakeCursor:
    def __init__(self, conn: FakeConnection) -> None:
        self.conn = conn

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def copy_expert(self, statement: Any, file: Any, size: int) -> None:
        self.conn.thread = threading.current_thread().name
        while True:
            chunk = file.read(size)
            assert len(chunk) <= size
            if not chunk:
                break
            self.conn.received.append(chunk)
            if self.conn.fail_after is not None and len(self.conn.received) >= self.conn.fail_after:
                raise RuntimeError("server said no")
            time.sleep(self.conn.delay)


class FakeConnection:
    def __init__(self, fail_after: int | None = None, delay: float = 0.0) -> None:
        self.received: list[bytes] = []
        self.fail_after = fail_after
        self.delay = delay
        self.thread = ""

    def cursor(self) -> FakeCursor:
        return FakeCursor(self)


def test_every_byte_arrives_in_order_in_chunks_of_at_most_size() -> None:
    conn = FakeConnection()
    stream = CopyStream(conn, "COPY t FROM STDIN", chunk_size=4).start()
    for part in (b"abcdefghij", b"k", b"lmnop"):
        stream.feed(memoryview(part))
    stream.close()
    assert b"".join(conn.received) == b"abcdefghijklmnop"
    assert max(len(c) for c in conn.received) <= 4
    assert conn.thread == "twophase-copy"


def test_feeding_a_failed_copy_raises_its_error() -> None:
    conn = FakeConnection(fail_after=1)
    stream = CopyStream(conn, "COPY", chunk_size=2).start()

    def feed_until_it_fails() -> None:
        for _ in range(100):  # the queue is bounded: feeding a dead COPY raises
            stream.feed(memoryview(b"xxxx"))

    with pytest.raises(RuntimeError, match="server said no"):
        feed_until_it_fails()
    with pytest.raises(RuntimeError, match="server said no"):
        stream.close()


def test_close_reports_an_error_of_the_last_chunk() -> None:
    conn = FakeConnection(fail_after=2)
    stream = CopyStream(conn, "COPY", chunk_size=10).start()
    stream.feed(memoryview(b"one"))
    stream.feed(memoryview(b"two"))
    with pytest.raises(RuntimeError, match="server said no"):
        stream.close()
    with pytest.raises(RuntimeError):
        stream.close()  # stays failed


def test_abort_makes_the_copy_fail_and_returns() -> None:
    conn = FakeConnection(delay=0.01)
    stream = CopyStream(conn, "COPY", chunk_size=10).start()
    stream.feed(memoryview(b"data"))
    stream.abort()
    assert isinstance(stream._error, CopyAbortedError)
    stream.abort()  # idempotent


def test_feeding_blocks_while_the_server_is_slow_then_completes() -> None:
    conn = FakeConnection(delay=0.02)
    stream = CopyStream(conn, "COPY", chunk_size=100).start()
    started = time.monotonic()
    for _ in range(10):
        stream.feed(memoryview(b"row\n"))
    stream.close()
    assert len(conn.received) == 10
    assert time.monotonic() - started >= 0.1  # backpressure: the queue holds only a few
