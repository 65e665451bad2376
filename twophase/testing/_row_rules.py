"""Row rules: which rows a fake target refuses and with what error, stored with the target.

A rule (:class:`RejectRule`) names a column and the values a row must not hold there,
and the error the target gives for such a row (its class, code and message). Like
fault rules, rules live in the target's storage, so executors see rules added after
the sink was pickled. The fake sinks' ``write`` leaves a refused row out of the
transaction and hands it back as a :class:`~twophase.RowError`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .._values import RowError
from ._storage import Storage

__all__ = ["RejectRule", "RowRules"]


def as_json(value: Any) -> Any:
    """Return ``value`` as the fake target stores it (bytes as hex, the rest as JSON has it)."""
    return json.loads(
        json.dumps(value, default=lambda v: v.hex() if isinstance(v, bytes) else str(v))
    )


@dataclass(frozen=True)
class RejectRule:
    """Refuse every row whose ``column`` holds one of ``values``.

    Attributes
    ----------
    column
        The column looked at (a row without it is never refused by the rule).
    values
        The values refused, as JSON has them (``None`` for a null).
    error_class, code, message
        The :class:`~twophase.RowError` a refused row is handed back with.
    rule_id
        Unique id.
    """

    column: str
    values: tuple[Any, ...] = (None,)
    error_class: str = "not_null"
    code: str | None = "23502"
    message: str = "null value violates not-null constraint"
    rule_id: str = ""


class RowRules:
    """Add and apply the row rules kept in a target's storage."""

    _storage: Storage

    def reject(
        self,
        column: str,
        values: Sequence[Any] = (None,),
        *,
        error_class: str = "not_null",
        code: str | None = "23502",
        message: str | None = None,
    ) -> RejectRule:
        """Refuse the rows whose ``column`` holds one of ``values``, from now on.

        Parameters
        ----------
        column
            The column.
        values
            The values refused (``None``: a null, as a ``NOT NULL`` column does).
        error_class, code
            What the target says of such a row (a ``RowError``'s class and code).
        message
            The target's message (default: one naming the column).

        Returns
        -------
        RejectRule
            The stored rule.
        """
        text = message or f"value refused in column {column!r}"
        rule = RejectRule(
            column, tuple(as_json(list(values))), error_class, code, text, uuid.uuid4().hex
        )
        self._storage.put(f"rejects/{rule.rule_id}", json.dumps(asdict(rule)).encode())
        return rule

    def allow(self, rule: RejectRule) -> None:
        """Take a row rule back: the target takes such rows from now on (a fixed table).

        Parameters
        ----------
        rule
            A rule :meth:`reject` returned.
        """
        self._storage.delete(f"rejects/{rule.rule_id}")

    def reject_rules(self) -> list[RejectRule]:
        """Return the row rules in force."""
        rules = []
        for name in self._storage.list("rejects"):
            raw = self._storage.get(f"rejects/{name}")
            if raw:
                fields = json.loads(raw)
                rules.append(RejectRule(**{**fields, "values": tuple(fields["values"])}))
        return rules

    def refused(self, rows: Sequence[dict[str, Any]]) -> list[RowError]:
        """Return an error for each of ``rows`` a rule refuses (the first matching rule's)."""
        rules = self.reject_rules()
        errors = []
        for index, row in enumerate(rows):
            for rule in rules:
                if rule.column in row and as_json(row[rule.column]) in rule.values:
                    errors.append(
                        RowError(index, rule.error_class, rule.message, rule.code, rule.column)
                    )
                    break
        return errors
