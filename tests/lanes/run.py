"""A release lane's engine-argument differential: `validate -r R`'s verdict on each corpus model.json against
what R's vLLM, installed in the lane's venv, does with it (`AsyncEngineArgs(**json)` + `create_engine_config`,
tests/lanes/engine_probe.py). Agreement: vLLM accepted it <=> validate reported no engine_args error.

    python -m tests.lanes.run --release 26.08 [--lane PYTHON] [--json OUT] [--markdown OUT]

PYTHON defaults to $TRITONPKG_LANES_DIR (~/.cache/tritonpkg/lanes)/vllm-<R's vLLM>/bin/python, the venv
scripts/lane_snapshot.sh makes."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.lanes.engine_corpus import Case, build_cases
from tests.support.repositories import make_tiny_llm
from tests.support.validate_repos import FIXTURE_BACKENDS, repo_with
from tritonpkg import compat

HERE = Path(__file__).resolve().parent
KNOWN_FILE = HERE / "KNOWN_DISAGREEMENTS.md"
PROBE = HERE / "engine_probe.py"
PROBE_TIMEOUT_S = 900


@dataclass
class Outcome:
    name: str
    what: str
    vllm_error: str | None
    validate_errors: list[str]

    @property
    def agrees(self) -> bool:
        return (self.vllm_error is None) == (not self.validate_errors)


def lane_python(release: str) -> Path:
    root = Path(os.environ.get("TRITONPKG_LANES_DIR") or Path.home() / ".cache" / "tritonpkg" / "lanes")
    return root / f"vllm-{compat.get_release(release).vllm_base}" / "bin" / "python"


def vllm_verdicts(python: Path, cases: list[Case]) -> dict[str, str | None]:
    out = subprocess.run([str(python), str(PROBE)], input=json.dumps({c.name: c.args for c in cases}),
                         capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{python} {PROBE.name} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)["verdicts"]


def validate_verdicts(release: str, cases: list[Case], work: Path) -> dict[str, list[str]]:
    """engine_args errors per case, judged by the release's snapshot (never a live vLLM), each case alone."""
    from tritonpkg.validate import validate_repository

    saved = {k: os.environ.get(k) for k in ("TRITONPKG_NO_LIVE_VLLM", "TRITONPKG_BACKENDS")}
    os.environ.update(TRITONPKG_NO_LIVE_VLLM="1", TRITONPKG_BACKENDS=str(FIXTURE_BACKENDS))
    out = {}
    try:
        for c in cases:
            report = validate_repository(repo_with(work / c.name, c.args), target_release=release)
            out[c.name] = [f"{p.rule} {p.field}: {p.message}" for p in report.problems
                           if p.severity == "error" and p.rule.startswith("engine_args")]
    finally:  # the environment is the test session's: every later test would read the fixture backends
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return out


def known_disagreements() -> dict[str, str]:
    rows = re.findall(r"^\| `([^`]+)` \|.*\| ([^|]+) \|$", KNOWN_FILE.read_text(), re.MULTILINE)
    return {name: why.strip() for name, why in rows}


def run(release: str, python: Path, work: Path) -> list[Outcome]:
    model = make_tiny_llm(work / "tiny-llm", context=512)
    cases = build_cases(release, str(model))
    engine = vllm_verdicts(python, cases)
    judged = validate_verdicts(release, cases, work / "cases")
    return [Outcome(c.name, c.what, engine[c.name], judged[c.name]) for c in cases]


def markdown(release: str, outcomes: list[Outcome]) -> str:
    bad = [o for o in outcomes if not o.agrees]
    lines = [f"{len(outcomes) - len(bad)} of {len(outcomes)} cases agree on {release}.", "",
             "| case | vLLM | validate | mutation |", "| --- | --- | --- | --- |"]
    lines += [f"| `{o.name}` | {o.vllm_error or 'accepted'} | {'; '.join(o.validate_errors) or 'clean'} | {o.what} |"
              .replace("\n", " ") for o in bad]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--release", default="26.08")
    ap.add_argument("--lane", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--markdown", type=Path, default=None)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tritonpkg-lane-") as tmp:
        outcomes = run(args.release, args.lane or lane_python(args.release), Path(tmp))
    if args.json:
        args.json.write_text(json.dumps([asdict(o) | {"agrees": o.agrees} for o in outcomes], indent=1))
    text = markdown(args.release, outcomes)
    if args.markdown:
        args.markdown.write_text(text)
    sys.stdout.write(text)
    return 0 if all(o.agrees for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
