"""The fuzz harness: one property for every parser of outside input, checked the same way for each target.

A target turns a generated case (plain JSON data, so a case can be saved to the corpus and replayed) into files
or a request under a fresh root and runs the toolkit's parser on it. The property: the parser returns (its
findings each naming a file), or raises the toolkit's own error type naming the file or field; never another
exception, never past the time bound, never a file created outside the root (the harness gives each case a
`root/` beside an `outside/` folder and a working directory of its own, and checks both are left untouched)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

CORPUS = Path(__file__).resolve().parent / "corpus"
CASE_SECONDS = float(os.environ.get("TRITONPKG_FUZZ_CASE_SECONDS", "20"))


class Violation(AssertionError):  # noqa: N818  an assertion of the property, not an error of the code
    """A case broke the property; the message says how."""


class Hang(BaseException):
    """The time bound ran out (a BaseException, so a target's `except Exception` cannot swallow it)."""


@dataclass(frozen=True)
class Target:
    name: str
    strategy: st.SearchStrategy[Any]
    run: Callable[[Any, Path], Any]  # (case, root) -> the parser's result
    errors: tuple[type[BaseException], ...]  # the toolkit's own error types for this input
    names_it: Callable[[BaseException], bool] = field(default=lambda exc: bool(getattr(exc, "file", None)
                                                                                or getattr(exc, "field", None)))
    check_result: Callable[[Any], None] = field(default=lambda result: None)
    warm: Any = None  # a case run once, unbounded, before any bounded one (imports, caches)
    smoke_examples: int | None = None  # fewer cases in the default run for a target whose case costs more


@contextlib.contextmanager
def _bound(seconds: float) -> Iterator[None]:
    def expired(signum: int, frame: Any) -> None:
        raise Hang()

    previous = signal.signal(signal.SIGALRM, expired)
    start = time.monotonic()
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)  # pytest-timeout's own alarm, if one is set
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 0.001))


_warmed: set[str] = set()


def check(target: Target, case: Any) -> str:
    """Run one case; the outcome ('ok' or the error type's name), or Violation."""
    if target.warm is not None and target.name not in _warmed:
        _warmed.add(target.name)
        with tempfile.TemporaryDirectory() as base:
            (Path(base) / "root").mkdir()
            with contextlib.suppress(Exception):
                target.run(target.warm, Path(base) / "root")
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        base = Path(tmp)
        root, outside, cwd = base / "root", base / "outside", base / "cwd"
        for d in (root, outside, cwd):
            d.mkdir()
        here = os.getcwd()
        os.chdir(cwd)
        try:
            with _bound(CASE_SECONDS):
                outcome = _outcome(target, case, root)
        except Hang:
            raise Violation(f"{target.name}: no answer within {CASE_SECONDS} s") from None
        finally:
            os.chdir(here)
        stray = sorted({p.name for p in base.iterdir()} - {"root", "outside", "cwd"})
        stray += [str(p.relative_to(base)) for d in (outside, cwd) for p in d.rglob("*")]
        if stray:
            raise Violation(f"{target.name}: files created outside the root: {stray[:5]}")
        return outcome


def _outcome(target: Target, case: Any, root: Path) -> str:
    try:
        result = target.run(case, root)
    except (Hang, Violation):
        raise
    except target.errors as exc:
        if not target.names_it(exc):
            raise Violation(f"{target.name}: {type(exc).__name__} names no file or field: {exc}") from exc
        return type(exc).__name__
    except Exception as exc:
        raise Violation(f"{target.name}: {type(exc).__name__} escaped: {exc}\n{traceback.format_exc()}") from exc
    target.check_result(result)
    return "ok"


def corpus_cases(target: str) -> list[Path]:
    folder = CORPUS / target
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def load_case(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))["case"]


def save_case(target: str, case: Any, why: str) -> Path:
    """Write a failing case into the corpus (named by its content), where the smoke run replays it."""
    text = json.dumps({"why": why.splitlines()[0][:300], "case": case}, indent=1, sort_keys=True,
                      ensure_ascii=True)
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"crash-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
    path.write_text(text + "\n", encoding="utf-8")
    return path
