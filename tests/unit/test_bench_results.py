"""The benchmark figures the docs quote are the ones the benches wrote. A quoted run sits between
`<!-- figures: bench/results/NAME.json -->` and `<!-- /figures -->` in bench/README.md or a docs page; every
number in it (outside code spans and link targets) must be a value of that results file at the precision shown,
and a date in it the run's date. Every results file is a bench's own record (its `--json OUT`) and is quoted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
BLOCK = re.compile(r"^<!-- figures: (\S+) -->\n(.*?)^<!-- /figures -->", re.DOTALL | re.MULTILINE)
OPENING = re.compile(r"^<!-- figures:", re.MULTILINE)
NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")
DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")
NOT_PROSE = re.compile(r"`[^`]*`|\]\([^)]*\)|<!--.*?-->", re.DOTALL)


def _pages() -> list[Path]:
    return [ROOT / "bench" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _values(node: object) -> list[float]:
    if isinstance(node, bool) or node is None or isinstance(node, str):
        return []
    if isinstance(node, (int, float)):
        return [float(node)]
    items = node.values() if isinstance(node, dict) else node
    return [v for item in items for v in _values(item)]  # type: ignore[union-attr]


def mismatches(text: str, record: dict) -> list[str]:
    """The figures in `text` that no value of `record` rounds to, and dates other than the run's."""
    prose = NOT_PROSE.sub(" ", text)
    wrong = [f"date {d} (the run's is {record['date'][:10]})" for d in DATE.findall(prose) if d != record["date"][:10]]
    values = _values({k: record[k] for k in ("options", "host", "results")})
    for token in NUMBER.findall(DATE.sub(" ", prose)):
        shown = token.lstrip("+").replace(",", "")
        decimals = len(shown.split(".")[1]) if "." in shown else 0
        figure = float(shown)
        if not any(abs(v - figure) <= 0.5 * 10 ** -decimals + 1e-9 for v in values):
            wrong.append(token)
    return wrong


def _blocks() -> list[tuple[Path, str, str]]:
    found = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        opened = len(OPENING.findall(text))
        blocks = [(page, m.group(1), m.group(2)) for m in BLOCK.finditer(text)]
        assert len(blocks) == opened, f"{page}: a `<!-- figures: FILE -->` without its `<!-- /figures -->`"
        found += blocks
    return found


def test_quoted_figures_match_their_results_files() -> None:
    blocks = _blocks()
    assert len(blocks) >= 2
    wrong = []
    for page, name, text in blocks:
        path = ROOT / name
        assert path.parent == RESULTS and path.exists(), f"{page.relative_to(ROOT)}: {name} is not in bench/results/"
        bad = mismatches(text, json.loads(path.read_text(encoding="utf-8")))
        if bad:
            wrong.append(f"{page.relative_to(ROOT)} quoting {name}: {', '.join(bad)} not in the file")
    assert not wrong, "\n".join(wrong)


def test_a_changed_figure_is_caught() -> None:
    page, name, text = _blocks()[0]
    record = json.loads((ROOT / name).read_text(encoding="utf-8"))
    assert mismatches(text, record) == []
    decimal = re.search(r"(?<![\w.`])(\d+\.\d*)(\d)(?![\d`])", NOT_PROSE.sub(" ", text))
    assert decimal, f"{page}: no decimal figure in the block quoting {name}"
    changed = decimal.group(1) + str((int(decimal.group(2)) + 5) % 10)
    assert mismatches(text.replace(decimal.group(0), changed, 1), record), (decimal.group(0), changed)
    run_date = record["date"][:10]
    assert mismatches(text + "\nrun of 2001-01-01", record) == [f"date 2001-01-01 (the run's is {run_date})"]


def test_every_results_file_is_a_bench_record_and_quoted() -> None:
    files = sorted(RESULTS.glob("*.json"))
    assert len(files) >= 2
    quoted = {name for _, name, _ in _blocks()}
    for path in files:
        record = json.loads(path.read_text(encoding="utf-8"))
        assert {"schema", "bench", "argv", "options", "date", "host", "results"} <= set(record), path.name
        script = ROOT / record["bench"]
        assert script.parent == ROOT / "bench" and script.exists(), f"{path.name}: bench {record['bench']!r}"
        assert f"bench/results/{path.name}" in quoted, f"{path.name} is quoted nowhere"


def test_every_bench_script_writes_json() -> None:
    for script in sorted((ROOT / "bench").glob("*.py")):
        source = script.read_text(encoding="utf-8")
        # embeddings.py is `tritonpkg bench embeddings`, whose --json prints the rows
        assert '"--json"' in source or "bench_cmd import app" in source, f"{script.name} has no --json OUT"


def test_a_bench_run_writes_its_record(tmp_path: Path) -> None:
    """bench/haproxy_replay.py for real (HAProxy and an echo unit, a few requests): the file is the record."""
    out = tmp_path / "sub" / "haproxy.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "haproxy_replay.py"), "--rounds", "2", "--requests",
                           "30", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["bench"] == "bench/haproxy_replay.py" and record["options"] == {"rounds": 2, "requests": 30}
    rows = record["results"]["rows"]
    assert {(r["configuration"], r["client"]) for r in rows} == {
        (c, k) for c in ("now (body held)", "before (forwarded as it comes)") for k in ("one write", "headers, body")}
    for row in rows:
        assert 0 < row["p50_ms"] <= row["p99_ms"], row
        assert f"{row['p50_ms']:8.3f}" in proc.stdout, (row, proc.stdout)
    assert list(out.parent.iterdir()) == [out]  # no temporary file left beside it


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_record_is_written_whole_or_not_at_all(tmp_path: Path, bad: float) -> None:
    from tritonpkg.benchmarks import results

    out = tmp_path / "r.json"
    with pytest.raises(ValueError, match="JSON compliant"):
        results.write(out, "bench/x.py", {}, {"p50": bad})
    assert list(tmp_path.iterdir()) == []
