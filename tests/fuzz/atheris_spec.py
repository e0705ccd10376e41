"""A coverage-guided campaign over the spec loader (atheris, the `fuzz` extra): bytes as a tritonpkg.yaml, under
the harness's property (tests/fuzz/harness.py: the toolkit's SpecError naming the file or field, nothing else,
no file outside the root). `bash scripts/fuzz.sh --atheris [--minutes N]`; libFuzzer's own flags after `--`.
New coverage goes to tests/fuzz/atheris-corpus/spec/ (not in git); a crash is saved into the replayed corpus
(tests/fuzz/corpus/spec/) as a raw-YAML case, and atheris stops on it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import atheris
from hypothesis import strategies as st

with atheris.instrument_imports(include=["tritonpkg", "yaml", "pydantic"]):
    from tests.fuzz.harness import Target, Violation, check, save_case
    from tritonpkg.errors import SpecError
    from tritonpkg.spec import load_spec

WORK = Path(__file__).resolve().parent / "atheris-corpus" / "spec"


def _run(case: dict[str, Any], root: Path) -> Any:
    folder = root / "spec"
    folder.mkdir()
    (folder / "tritonpkg.yaml").write_text(case["raw"], "utf-8", "surrogatepass")
    return load_spec(folder)


TARGET = Target("spec", st.nothing(), _run, (SpecError,))


def one_input(data: bytes) -> None:
    case = {"raw": data.decode("utf-8", "surrogateescape")}
    try:
        check(TARGET, case)
    except Violation as exc:
        print(f"[atheris spec] crash saved to {save_case('spec', case, str(exc))}", file=sys.stderr, flush=True)
        raise


def main() -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    argv = [sys.argv[0], *sys.argv[1:], str(WORK)]
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
