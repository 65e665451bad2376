"""Several exactly-once targets from one query: each batch computed once, each sink in turn.

``twophase.write_stream(df, [sink_a, (sink_b, project)], ...)`` checks the list as
:class:`Targets` and runs its pairs in ``foreachBatch`` (``_entry.QueryBatches``): the
micro-batch is persisted, then each sink runs its own protocol on it (or on
its projection of it), one after the other, and the batch is unpersisted. Each sink keeps its own
coordinator log under the query's checkpoint (``<checkpoint>/twophase/<sink name>/``), so each
target is exactly-once on its own; they are not atomic together. A crash between two sinks'
commits of a batch leaves the batch in the first target only: Spark runs the batch again on
restart, the first sink finds it committed and skips it, the next ones write it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from .._engine._hooks import AnySink
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Projection", "Target", "Targets"]

#: A sink's own view of the batch: columns it writes, computed from the shared batch.
Projection: TypeAlias = Callable[["DataFrame"], "DataFrame"]
#: A sink, or a sink with the projection it writes.
Target: TypeAlias = AnySink | tuple[AnySink, Projection]


class Targets:
    """The sinks of a query with several, each with its projection, checked.

    Parameters
    ----------
    targets
        Sinks, or ``(sink, projection)`` pairs, run in this order. Sink names
        must differ: each names its own coordinator log in the checkpoint.

    Raises
    ------
    ConfigurationError
        No target, a target that is neither, or two sinks with one name.
    """

    def __init__(self, targets: Sequence[Target]) -> None:
        pairs: list[tuple[AnySink, Projection | None]] = []
        for target in targets:
            if isinstance(target, tuple):
                if len(target) != 2 or not callable(target[1]):
                    raise ConfigurationError(
                        f"a target is a sink or a (sink, projection) pair, not {target!r}",
                        setting="sinks",
                    )
                pairs.append((target[0], target[1]))
            else:
                pairs.append((target, None))
        if not pairs:
            raise ConfigurationError("write_stream needs at least one sink", setting="sinks")
        names = [sink.name for sink, _ in pairs]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ConfigurationError(
                f"two sinks of one query are named {repeated[0]!r}: a sink's name names its "
                "coordinator log in the checkpoint, so each sink of a query needs its own",
                sink=repeated[0],
                setting="name",
            )
        self.pairs = pairs

    @property
    def sinks(self) -> list[AnySink]:
        """The sinks, in the order they run."""
        return [sink for sink, _ in self.pairs]

    def __repr__(self) -> str:
        return f"Targets({', '.join(sink.name for sink in self.sinks)})"


def as_targets(sink: Any) -> Targets | None:
    """Return a :class:`Targets` for a list or tuple of targets, None for a single sink."""
    return Targets(sink) if isinstance(sink, (list, tuple)) else None
