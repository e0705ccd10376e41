"""What validation returns: a flat list of Problems (each locating itself) wrapped in a Report."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, computed_field, field_validator

Severity = Literal["error", "warning"]
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # what a terminal acts on: NUL, ESC, CSI, newline, ...
_CONTROL_IN_TEXT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # the same, but a message may break lines


def _escaped(pattern: re.Pattern[str], text: str) -> str:
    return pattern.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class Problem(BaseModel):
    """One finding. `error` = the real server (or vLLM) would reject it at load; `warning` = it loads,
    but something is probably wrong (ignored settings, remote weights, version drift). Rules judge the
    config after Triton's auto-complete; `auto_complete` names what supplied a value the config omits."""

    rule: str
    severity: Severity
    file: str
    line: int | None = None
    column: int | None = None
    model: str | None = None
    field: str | None = None
    message: str
    expected: str | None = None
    auto_complete: str | None = None  # set when the field's value is one Triton's auto-complete supplies

    @field_validator("file", "model", "field")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        """A name quoted from a hostile repository (a folder, a key, a parser's message) reaches a terminal and
        logs: its control characters are shown escaped, never sent."""
        return None if v is None else _escaped(_CONTROL, v)

    @field_validator("message", "expected")
    @classmethod
    def _text(cls, v: str | None) -> str | None:
        return None if v is None else _escaped(_CONTROL_IN_TEXT, v)

    def where(self) -> str:
        parts = [self.file]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)


class Report(BaseModel):
    problems: list[Problem] = []
    models: list[str] = []
    target_release: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    def rules(self) -> list[str]:
        return [p.rule for p in self.problems]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
