"""A decision record whose handles are a pickle that runs code is refused, and the code never runs.

Whoever can write to the checkpoint location could plant such a record. The
payloads here write a file when unpickled; the tests assert the refusal, its
message, that the prepared transactions were neither committed nor rolled back,
and that the file does not exist -- after recovery and after every command of
``twophase`` that reads the log.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from twophase import CoordinatorLogError, TransactionHandle
from twophase._cli._commands import main
from twophase.testing import FakeSink, FakeTarget, LocalRunner, SimulatedCrash

pytestmark = pytest.mark.unit


class _Exec:
    """Unpickles by calling ``builtins.exec`` on code that writes a file."""

    def __init__(self, path: Path) -> None:
        self.code = f"open({str(path)!r}, 'w').write('code ran')"

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (self.code,))


class _System:
    """Unpickles by calling ``os.system``."""

    def __init__(self, path: Path) -> None:
        self.command = f"touch {path}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


class _InsideAHandle:
    """A genuine 0.2.0 handle class name, built from an argument that runs the code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (_new_handle, (_Exec(self.path),))


def _new_handle() -> None:  # named in the pickle as the handle class (see _payload)
    raise AssertionError("never called")


def _payload(kind: str, path: Path) -> str:
    if kind == "exec":
        data = pickle.dumps([_Exec(path)])
    elif kind == "os.system":
        data = pickle.dumps([_System(path)])
    else:  # a real handle class name, with the code in its state
        data = pickle.dumps([_InsideAHandle(path)])
        # Name the reconstructor as 0.2.0 named TransactionHandle.
        data = _rename_global(data, __name__, "_new_handle", "twophase._types", "TransactionHandle")
    return base64.b64encode(data).decode()


def _rename_global(data: bytes, module: str, name: str, new_module: str, new_name: str) -> bytes:
    """Replace a STACK_GLOBAL's two short strings (protocol 4+) in a pickle."""

    def short(text: str) -> bytes:
        raw = text.encode()
        return b"\x8c" + bytes([len(raw)]) + raw

    assert short(module) in data
    assert short(name) in data
    out = data.replace(short(module), short(new_module), 1).replace(short(name), short(new_name), 1)
    if out[2:3] == b"\x95":  # FRAME opcode after PROTO: fix its 8-byte length
        length = int.from_bytes(out[3:11], "little") + len(out) - len(data)
        out = out[:3] + length.to_bytes(8, "little") + out[11:]
    return out


def _crash_after_decision(tmp_path: Path) -> tuple[LocalRunner, FakeTarget, Path]:
    target = FakeTarget(str(tmp_path / "target"))
    runner = LocalRunner(FakeSink("orders", target), tmp_path / "chk")
    runner.crash_at("decided", 0)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, [[{"id": p * 10 + i} for i in range(3)] for p in range(2)])
    assert len(target.prepared()) == 2
    decision = Path(runner.log.store.location) / "batches" / f"{0:020d}.decision.json"
    assert decision.exists()
    return runner, target, decision


def _tamper(decision: Path, payload: str) -> None:
    """Make the record look like 0.2.0's: no format, the handles a base64 pickle."""
    record = json.loads(decision.read_text())
    for key in ("format", "writer", "transactions"):
        record.pop(key)
    record["handles"] = payload
    decision.write_text(json.dumps(record, sort_keys=True) + "\n")


@pytest.mark.parametrize(
    ("kind", "named"),
    [
        ("exec", "builtins.exec"),
        ("os.system", "posix.system"),
        ("inside a handle", "builtins.exec"),
    ],
)
def test_recovery_refuses_a_decision_whose_pickle_runs_code(
    kind: str, named: str, tmp_path: Path
) -> None:
    evidence = tmp_path / "evidence"
    runner, target, decision = _crash_after_decision(tmp_path)
    _tamper(decision, _payload(kind, evidence))
    runner.restart()
    with pytest.raises(CoordinatorLogError) as err:
        runner.run_batch(1, [[{"id": 100}]])
    message = str(err.value)
    assert f"it names {named}" in message, message
    assert "was not loaded" in message
    assert "the decision of batch 0" in message
    assert "written by twophase 0.2.0" in message
    assert str(decision) in message
    assert not evidence.exists(), "the pickle ran code"
    assert len(target.prepared()) == 2, "the batch's transactions are left as they are"
    assert target.committed_rows() == []


def test_a_real_0_2_0_handle_pickle_still_finishes_the_batch(tmp_path: Path) -> None:
    runner, target, decision = _crash_after_decision(tmp_path)
    handles = runner.log.read_decision(0, runner.sink.decode_handle)
    # What 0.2.0 wrote: the handles pickled (by reference to twophase._types.TransactionHandle,
    # the module twophase._values was called then).
    data = pickle.dumps(handles)
    data = _rename_global(
        data, "twophase._values", "TransactionHandle", "twophase._types", "TransactionHandle"
    )
    _tamper(decision, base64.b64encode(data).decode())
    runner.restart()
    runner.run_batch(1, [[{"id": 100}]])
    assert sorted(r["id"] for r in target.committed_rows()) == [0, 1, 2, 10, 11, 12, 100]
    assert target.prepared() == []
    assert all(type(h) is TransactionHandle for h in handles)


def directory_fake_sink(name: str, path: str) -> FakeSink:
    """A --target factory of the CLI: a fake of the coordinated protocol over ``path``."""
    return FakeSink(name, FakeTarget(path))


def test_no_command_of_twophase_runs_the_pickle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evidence = tmp_path / "evidence"
    runner, target, decision = _crash_after_decision(tmp_path)
    _tamper(decision, _payload("exec", evidence))
    checkpoint = str(tmp_path / "chk")
    factory = ["--target", f"{__name__}:directory_fake_sink", "-o", f"path={tmp_path / 'target'}"]
    runs = {
        "status": ["status", checkpoint, *factory],
        "status --json": ["status", checkpoint, "--json", *factory],
        "resolve": ["resolve", checkpoint, "--sink", "orders", "--batch", "0", "--rewrite"],
        "abort-in-doubt": [
            "abort-in-doubt",
            "--identity",
            runner.identity.token,
            "--checkpoint",
            checkpoint,
            *factory,
            "--yes",
        ],
    }
    outputs = {}
    for name, argv in runs.items():
        code = main(argv)
        captured = capsys.readouterr()
        outputs[name] = (code, captured.out + captured.err)
        assert not evidence.exists(), f"`twophase {name}` ran the pickle"
    assert outputs["status"][0] == 0, outputs["status"][1]
    assert "decision recorded with 2 transaction(s)" in outputs["status"][1]
    assert outputs["abort-in-doubt"][0] == 1, "the decided batch still needs its transactions"
    assert outputs["resolve"][0] != 0, outputs["resolve"][1]
    assert len(target.prepared()) == 2


@pytest.mark.parametrize("kind", ["exec", "os.system", "inside a handle"])
def test_the_payloads_do_run_code_when_unpickled_normally(kind: str, tmp_path: Path) -> None:
    """The control: what the tests above refuse would have written the file."""
    evidence = tmp_path / "control"
    data = base64.b64decode(_payload(kind, evidence))
    if kind == "inside a handle":  # the code runs, then TransactionHandle(None) fails
        with pytest.raises(TypeError, match="missing"):
            pickle.loads(data)
    else:
        pickle.loads(data)
    assert evidence.exists()
