"""Two ``twophase dead-letters redrive`` runs of one Kafka sink at once: each letter moves once.

Both redrives read the same pending letters; they share the sink's redrive ``transactional.id``,
so the second to start fences the first. Two interleavings, made certain by holding each thread
at a point of the redrive (the broker, the topics and the command are real):

* the second starts while the first is producing: the first is fenced, its transaction aborted,
  and it exits 1 saying so; the second moves every letter;
* the second starts after the first committed: it must not produce the letters again (the
  redrive group's offset moved), and exits 1 saying so.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from kafka_support import Record

from twophase.connectors.kafka import KafkaSink
from twophase.connectors.kafka._dead_letters import decode
from twophase.testing import LocalRunner
from twophase_dev import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: What the fenced or late redrive says (its whole message is on stderr, after "twophase: error:").
SAID = {
    "while_the_first_produces": "another redrive of sink 'dl-twice' fenced this one",
    "after_the_first_committed": "another redrive of sink 'dl-twice' committed",
}


@pytest.mark.parametrize("when", list(SAID))
def test_two_redrives_at_once_move_each_letter_once_and_the_other_exits_with_an_error(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: Callable[..., list[Record]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    when: str,
) -> None:
    from twophase._cli._commands import main
    from twophase.connectors.kafka import _redrive

    topic, dead = make_topic(1, prefix="dlr"), make_topic(1, prefix="dlq")
    options: dict[str, Any] = {
        "bootstrap_servers": kafka_broker.bootstrap_servers,
        "bad_rows": "dead_letter",
        "dead_letter_topic": dead,
        "control_topic": f"{dead}-ctl",
        "operation_timeout": 15.0,
    }
    # Rows with a null topic are set aside; the redriving sink has the topic option.
    batch = pa.record_batch(
        {"topic": pa.array([topic, None, None], pa.string()), "value": [b"a", b"b", b"c"]}
    )
    LocalRunner(KafkaSink("dl-twice", **options)).run_batch(0, [[batch]])
    args = ["dead-letters", "redrive", "--sink", "dl-twice", "--yes"]
    args += ["--target", "twophase.connectors.kafka:KafkaSink"]
    for key, value in {**options, "topic": topic}.items():
        args += ["-o", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]

    reached = {e: threading.Event() for e in ("producing", "second_init", "first", "second")}
    init, retry = _redrive.init_producer, _redrive.retry_locally

    def init_producer(*a: Any, **kw: Any) -> Any:
        if threading.current_thread().name == "second":  # it holds the letters the first does
            reached["second_init"].set()
            first = "producing" if when == "while_the_first_produces" else "first"
            assert reached[first].wait(60), f"the first redrive never reached {first}"
        elif when == "after_the_first_committed":
            assert reached["second_init"].wait(60), "the second redrive never started"
        return init(*a, **kw)

    def retry_locally(*a: Any, **kw: Any) -> Any:  # send_offsets, then the commit
        name = threading.current_thread().name
        if (
            name == "first"
            and when == "while_the_first_produces"
            and not reached["producing"].is_set()
        ):
            reached["producing"].set()  # its records are produced, not committed
            assert reached["second"].wait(60), "the second redrive never finished"
        return retry(*a, **kw)

    monkeypatch.setattr(_redrive, "init_producer", init_producer)
    monkeypatch.setattr(_redrive, "retry_locally", retry_locally)
    codes: dict[str, int] = {}

    def run(name: str) -> None:
        try:
            codes[name] = main(args)
        finally:
            reached[name].set()

    threads = [threading.Thread(target=run, args=(n,), name=n) for n in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert reached["second_init"].is_set(), "the second redrive did not overlap the first"
    assert sorted(r.value for r in read_topic(topic)) == [b"a", b"b", b"c"], "each row once"
    letters = [decode(r.value) for r in read_topic(dead) if r.value is not None]
    assert [d.position for d in letters] == [1, 2], "no letter set aside again"
    fixed = KafkaSink("dl-twice", **options, topic=topic)
    assert list(fixed.read_dead_letters()) == [], "every letter redriven"
    if when == "while_the_first_produces":
        assert reached["producing"].is_set(), "the first redrive was not producing"
        assert codes == {"first": 1, "second": 0}, codes
    else:
        assert codes == {"first": 0, "second": 1}, codes
    err = capsys.readouterr().err
    assert err.count("twophase: error:") == 1, err
    assert SAID[when] in err, err
