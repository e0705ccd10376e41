"""The skip guard: on these machines every real-stack test must run, so a skip that hides a missing part
(pytriton, vLLM, peft, the C++ extension, kubernetes-validate) fails the run instead of passing it quietly.

On when `TRITONPKG_SKIP_GUARD=1` (scripts/test.sh sets it for a whole-suite run). The skips that are meant
(an oracle absent outside the workplace, a reproduction run by hand) are listed in tests/allowed_skips.txt,
one node id prefix per line with its reason after ` # `; a listed entry that no longer matches a test is
reported too, so the list cannot go stale."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

ALLOWED = Path(__file__).resolve().parent.parent / "allowed_skips.txt"
ENV = "TRITONPKG_SKIP_GUARD"


def enabled() -> bool:
    """On in the process that sees every report: the run itself, or the controller of an xdist run (its
    workers each see a part)."""
    return os.environ.get(ENV) == "1" and "PYTEST_XDIST_WORKER" not in os.environ


def load_allowed(path: Path = ALLOWED) -> dict[str, str]:
    """Node-id prefix -> reason, from the allowed-skips file (blank lines and `#` lines ignored)."""
    allowed: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        prefix, _, reason = line.partition(" # ")
        if not reason.strip():
            raise ValueError(f"{path.name}: {prefix.strip()!r} has no reason (expected 'NODEID # why')")
        allowed[prefix.strip()] = reason.strip()
    return allowed


@dataclass
class SkipGuard:
    """Collects skipped node ids during the run; `violations` says what the run must not have skipped."""

    allowed: dict[str, str]
    skipped: dict[str, str] = field(default_factory=dict)
    collected: set[str] = field(default_factory=set)

    def record(self, nodeid: str, reason: str) -> None:
        self.skipped[nodeid] = reason

    def violations(self) -> list[str]:
        out = [f"{nodeid}: skipped ({reason})" for nodeid, reason in sorted(self.skipped.items())
               if not any(nodeid.startswith(prefix) for prefix in self.allowed)]
        out += [f"{prefix}: listed in {ALLOWED.name} but matches no collected test"
                for prefix in sorted(self.allowed)
                if self._module_collected(prefix) and not any(n.startswith(prefix) for n in self.collected)]
        return out

    def _module_collected(self, prefix: str) -> bool:
        """Stale entries are judged only in a run that collected their module (a run of other files, or a
        child pytest that inherits the variable, says nothing about them)."""
        module = prefix.split("::")[0]
        return any(nodeid.split("::")[0] == module for nodeid in self.collected)
