"""Load every corpus case in one real tritonserver, run `validate_repository` on each case in
isolation, and compare: agreement means "the server loaded it" <=> "validate reported no error".

    python -m tests.differential.run [--json OUT] [--markdown OUT] [--all] [--only SUBSTRING]

Why few servers for everything: starting tritonserver costs seconds, loading a Python model about one;
servers in explicit model-control mode with every case as its own uniquely named model (load, record,
unload) keep the whole corpus within a few minutes on two cores. A load mostly waits (the stub process
starting, ~0.3 s of CPU in 1.3 s), so the cases are dealt to `SERVERS` servers that load side by side,
each one case at a time (see `_load_all` for why never two at once in one server).

Why each case is also written to its own repository for validate: validate's verdict on a case must
not depend on the other cases' models (an ensemble case carries its own composing models).

A Triton 2.51 behaviour this has to live with: when a Python model's model.py is missing, the stub
dies in pre-initialisation and the server never answers that load request (other loads keep
working). A load that gets no answer within `load_timeout` counts as refused, and the message says so.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import re
import sys
import tempfile
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path

from tests.differential.corpus import Case, backend_sources, build_cases

HERE = Path(__file__).resolve().parent
KNOWN_FILE = HERE / "KNOWN_DISAGREEMENTS.md"
TARGET_RELEASE = None  # the local runtime (Triton 2.51 here): see validate_case
# No answer by then: the server hangs on this load (a normal one answers in ~1.3 s, the slowest seen in 546 loads
# of three runs 2.6 s: ten times that leaves room for a loaded machine).
LOAD_TIMEOUT_S = 30.0
SOFT_WAIT_S = 4.0
# Each load the server never answers keeps one of its model-load threads forever (default 4: after four
# such loads every later load hangs too), so the corpus server gets enough threads for all of them.
LOAD_THREADS = 16  # normal loads answer within a few seconds; longer ones are set aside
SERVER_RESTARTS = 6  # a server that dies under a load is started again for the cases left (_load_all): 0-2 a run
SERVERS = 4
"""Servers loading side by side: a load is mostly waiting (~0.3 s of CPU in 1.3 s), so four on two cores keep both
cores busy."""


@dataclass
class Outcome:
    """What the server and validate said about one case."""

    case: str
    base: str
    description: str
    expect: str  # "load"/"refuse": what Triton 2.51 did when the case was written (corpus.py)
    server_ok: bool
    server_message: str
    load_seconds: float
    validate_ok: bool | None  # None: validate raised instead of answering
    validate_errors: list[str] = field(default_factory=list)
    validate_warnings: list[str] = field(default_factory=list)
    validate_crash: str = ""

    @property
    def agree(self) -> bool:
        return self.validate_ok is not None and self.server_ok == self.validate_ok

    @property
    def server_as_expected(self) -> bool:
        return self.server_ok == (self.expect == "load")


# -------------------------------------------------------------------------------------------------
# validate side

def _problem_text(p: object) -> str:
    where = ":".join(str(x) for x in (getattr(p, "file", None), getattr(p, "line", None)) if x not in (None, ""))
    model = getattr(p, "model", None)
    prefix = f"[{getattr(p, 'rule', '?')}]"
    if model:
        prefix += f" {model}"
    if getattr(p, "field", None):
        prefix += f" {p.field}"
    return f"{prefix}: {getattr(p, 'message', p)}" + (f" ({where})" if where else "")


def _severity(p: object) -> str:
    sev = getattr(p, "severity", "")
    return str(getattr(sev, "value", sev)).lower()


def validate_case(repo: Path, auto_complete: bool = True) -> tuple[bool | None, list[str], list[str], str]:
    """(ok, error texts, warning texts, crash traceback) of validate_repository on one case's repo.

    The target is the local runtime (validate's default), not the release name "24.10": the server
    under test *is* the local runtime, so validate must judge against what it has (no GPU, the
    backend directory's backends). A release target describes an NGC image on a GPU host, where
    KIND_GPU loads and unknown backends are only warnings."""
    try:
        from tritonpkg.validate import validate_repository

        report = validate_repository(repo, target_release=TARGET_RELEASE, auto_complete=auto_complete)
    except Exception:  # a crash is recorded as a disagreement, not raised
        return None, [], [], traceback.format_exc(limit=6)
    errors = [_problem_text(p) for p in report.problems if _severity(p) == "error"]
    warnings = [_problem_text(p) for p in report.problems if _severity(p) == "warning"]
    return bool(report.ok), errors, warnings, ""


# -------------------------------------------------------------------------------------------------
# server side

def corpus_runtime(workdir: Path):
    """The project's runtime with a backend directory of the corpus's own: Triton's Python backend plus
    the vLLM stand-in (never the project's real backends/vllm, which would start an engine)."""
    from tritonpkg.runtime import ensure_runtime
    from tritonpkg.runtime.backends import build_backend_dir
    from tritonpkg.runtime.layout import server_tree

    rt = ensure_runtime()
    bdir = workdir / "backends"
    stub, names = build_backend_dir(bdir, server_tree(rt.root), rt.python_version,
                                    source=backend_sources(workdir / "backend_sources"))
    return dataclasses.replace(rt, backend_dir=bdir, python_stub=stub, toolkit_backends=names)


def _load(server, case: Case) -> tuple[bool, str, float]:
    started = time.monotonic()
    ok, message = server.load_model(case.load)
    seconds = time.monotonic() - started
    if not ok and message.startswith("no answer from"):
        message = (f"no answer to the load request within {seconds:.0f} s (the server hangs on this "
                   f"model: counted as refused)")
    return ok, message.strip(), seconds


def _unload(server, case: Case) -> None:
    """Unload every model of the case (an ensemble's steps too), without waiting for its stubs to exit."""
    for name in case.model_names:
        with contextlib.suppress(Exception):  # a model that never loaded has nothing to unload
            server.unload_model(name, wait=False)


def _load_all(server, cases: list[Case]) -> tuple[dict[str, tuple[bool, str, float]], list[Case]]:
    """Load the cases one at a time, unloading each before the next; (results, cases to load again).

    One at a time because Triton 2.51 crashed (SIGSEGV in libtritonserver) twice in this corpus when
    loads and unloads of different models overlapped on four client threads. The only concurrency
    kept is for loads the server does not answer: a load still pending after SOFT_WAIT_S is left on
    its thread (it is almost surely one of the hangs described above) and collected at the end.

    The server can still die under a sequential load (SIGSEGV in libtritonserver, seen once in a CI run
    on `as_config_empty`, which loads in every other run): its "no answer" is then the crash, not a
    verdict on the case. The case it died on, the rest of the list, and every set-aside load that got no
    answer (a hang cannot be told from the crash) come back as cases to load again, on a fresh server."""
    results: dict[str, tuple[bool, str, float]] = {}
    pending: list[tuple[Case, Future]] = []
    again: list[Case] = []
    with ThreadPoolExecutor(max_workers=LOAD_THREADS) as pool:
        for i, case in enumerate(cases):
            future = pool.submit(_load, server, case)
            try:
                result = future.result(timeout=SOFT_WAIT_S)
            except FutureTimeout:
                pending.append((case, future))
                continue
            if not result[0] and not server.running:
                again = cases[i:]
                # The dead server's stubs inherited its sockets and keep set-aside load requests open: stop
                # the process group so those end now rather than at load_timeout.
                server.stop(grace=1.0)
                break
            results[case.name] = result
            _unload(server, case)
        crashed = bool(again)
        for case, future in pending:
            result = future.result()
            if not result[0] and (crashed or not server.running):
                again.insert(0, case)
                continue
            results[case.name] = result
            if result[0]:
                _unload(server, case)
    return results, again


def run_corpus(cases: list[Case], workdir: Path, load_timeout: float = LOAD_TIMEOUT_S,
               auto_complete: bool = True, servers: int = SERVERS) -> list[Outcome]:
    """Write the corpus under `workdir`, validate each case, load each in one of `servers` real servers;
    outcomes in corpus order. Server logs are kept at `workdir/server-N.log`. `auto_complete` False: the
    servers run with --disable-auto-complete-config and validate is told so."""
    workdir.mkdir(parents=True, exist_ok=True)
    server_repo = workdir / "server_repo"
    for case in cases:
        case.write(server_repo)
        case.write(workdir / "cases" / case.name)

    # validate runs on its own thread while the servers load: its first vLLM-backed check imports vLLM
    # (~15 s of CPU), and the load loops mostly wait on the servers.
    validator = ThreadPoolExecutor(max_workers=1)
    verdict_future = validator.submit(
        lambda: {c.name: validate_case(workdir / "cases" / c.name, auto_complete) for c in cases})

    runtime = corpus_runtime(workdir)
    # Repository-layout cases first in every shard: they hold the loads that hang, whose timeouts then run
    # out while the rest loads instead of being waited for at the end.
    order = sorted(cases, key=lambda c: c.base != "rp")
    shards = [order[i::servers] for i in range(max(1, min(servers, len(order))))]
    logs = [workdir / f"server-{i}.log" for i in range(len(shards))]
    with ThreadPoolExecutor(max_workers=len(shards)) as pool:
        parts = list(pool.map(lambda i: _serve_shard(server_repo, runtime, shards[i], logs[i], load_timeout,
                                                     auto_complete), range(len(shards))))
    loads: dict[str, tuple[bool, str, float, Path]] = {}
    for shard, part in zip(shards, parts, strict=True):
        for case, result in zip(shard, part, strict=True):
            loads[case.name] = result

    verdicts = verdict_future.result()
    validator.shutdown()
    texts: dict[Path, str] = {}
    outcomes = []
    for case in cases:
        ok, load_message, seconds, log = loads[case.name]
        v_ok, errors, warnings, crash = verdicts[case.name]
        message = load_message
        if not ok and "failed to poll from model repository" in message:
            if log not in texts:
                texts[log] = log.read_text(encoding="utf-8", errors="replace")
            message += poll_detail(texts[log], case.load)
        outcomes.append(Outcome(case.name, case.base, case.description, case.expect, ok, message,
                                round(seconds, 2), v_ok, errors, warnings, crash))
    return outcomes


def _serve_shard(server_repo: Path, runtime, cases: list[Case], log: Path, load_timeout: float,
                 auto_complete: bool) -> list[tuple[bool, str, float, Path]]:
    """One server over the whole corpus repository (explicit mode: it loads only what it is asked),
    loading `cases` one at a time; a server that dies is started again (its own log) for the cases left,
    at most SERVER_RESTARTS times, after which what is left counts as refused with the crash as reason."""
    from tritonpkg.runtime import TritonServer

    results: dict[str, tuple[bool, str, float, Path]] = {}
    todo = list(cases)
    for attempt in range(SERVER_RESTARTS + 1):
        run_log = log if attempt == 0 else log.with_name(f"{log.stem}.restart{attempt}.log")
        with TritonServer(server_repo, runtime=runtime, model_control="explicit", startup_timeout=120,
                          log_path=run_log,
                          extra_args=[f"--model-load-thread-count={LOAD_THREADS}",
                                      *([] if auto_complete else ["--disable-auto-complete-config"])]) as server:
            # load_model() waits `startup_timeout` seconds for an answer; after start-up that is the load
            # timeout, which bounds the loads the server never answers (see the module docstring).
            server.startup_timeout = load_timeout
            done, todo = _load_all(server, todo)
            server.stop(grace=5.0)  # a hung load keeps the server from exiting on SIGTERM: do not wait long
        results.update({name: (*r, run_log) for name, r in done.items()})
        if not todo:
            break
    for case in todo:
        results[case.name] = (False, f"the server died on every attempt to load this model ({run_log})", 0.0, run_log)
    return [results[c.name] for c in cases]


def poll_detail(log: str, model: str) -> str:
    """The reason behind Triton's terse "failed to poll from model repository" answer, from its log:
    the "Poll failed for model directory" line and, for a config that does not parse, protobuf's
    parser error (logged just before it, without a model name; loads are sequential, so it is this one)."""
    lines = log.splitlines()
    marker = f"Poll failed for model directory '{model}': "
    for i, line in enumerate(lines):
        if marker not in line:
            continue
        reason = line.split(marker, 1)[1].rstrip('"')
        if reason.startswith("failed to read text proto"):
            for prev in reversed(lines[max(0, i - 3):i]):
                if "[libprotobuf ERROR" in prev and "inference.ModelConfig: " in prev:
                    reason = "config.pbtxt does not parse: " + prev.split("inference.ModelConfig: ", 1)[1]
                    break
        return f" [server log: {reason}]"
    return ""


# -------------------------------------------------------------------------------------------------
# known disagreements and reports

def known_disagreements(path: Path = KNOWN_FILE) -> dict[str, str]:
    """case name -> reason, from the table rows of KNOWN_DISAGREEMENTS.md (`| `case` | ... | reason |`)."""
    known: dict[str, str] = {}
    if not path.exists():
        return known
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\|\s*`([a-z0-9_]+)`\s*\|(.*)\|\s*$", line)
        if m:
            known[m.group(1)] = m.group(2).split("|")[-1].strip()
    return known


def agreement_rate(outcomes: list[Outcome]) -> float:
    return sum(o.agree for o in outcomes) / len(outcomes) if outcomes else 0.0


def _verdict(o: Outcome) -> str:
    if o.validate_ok is None:
        return "validate crashed"
    return "no error" if o.validate_ok else "error"


def _short(text: str, limit: int = 220) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def markdown_report(outcomes: list[Outcome]) -> str:
    """Every disagreement with the server's message, validate's verdict and the rule that is likely
    missing or wrong: what the owner of tritonpkg/validate needs to fix it."""
    bad = [o for o in outcomes if not o.agree]
    known = known_disagreements()
    lines = [
        "# validate vs the real Triton 2.51 server: disagreements",
        "",
        (f"{len(outcomes)} cases, {sum(o.server_ok for o in outcomes)} loaded by the server, "
        f"{sum(not o.server_ok for o in outcomes)} refused; agreement {agreement_rate(outcomes):.1%} "
        f"({len(outcomes) - len(bad)}/{len(outcomes)})."),
        "",
    ]
    for o in bad:
        lines += [f"## `{o.case}`: {o.description}", ""]
        lines.append(f"- server: {'LOADED' if o.server_ok else 'REFUSED'}" +
                     (f": `{_short(o.server_message, 600)}`" if o.server_message else ""))
        lines.append(f"- validate: {_verdict(o)}")
        for e in o.validate_errors:
            lines.append(f"  - {_short(e, 400)}")
        if o.validate_crash:
            lines += ["", "```", o.validate_crash.strip(), "```"]
        if o.case in known:
            lines.append(f"- KNOWN_DISAGREEMENTS.md: {known[o.case]}")
        elif o.server_ok:
            lines.append("- likely fix: validate reports an error for a config the server accepts: the rule above "
                         "is too strict here (make it a warning or narrow it).")
        else:
            lines.append("- likely fix: validate misses what the server refuses: a rule for the server's "
                         "message above is missing.")
        lines.append("")
    return "\n".join(lines)


def print_report(outcomes: list[Outcome], show_all: bool = False, seconds: float | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    known = known_disagreements()
    rows = outcomes if show_all else [o for o in outcomes if not o.agree or (o.case in known)]
    table = Table(title="validate vs tritonserver 2.51" + (" (all cases)" if show_all else " (disagreements)"),
                  show_lines=False)
    for col in ("case", "server", "validate", "agree", "known", "server message / validate errors"):
        table.add_column(col, overflow="fold")
    for o in rows:
        detail = o.server_message if not o.server_ok else ""
        if o.validate_errors:
            detail += ("\n" if detail else "") + "validate: " + "; ".join(o.validate_errors)
        if o.validate_crash:
            detail += ("\n" if detail else "") + "validate crashed: " + o.validate_crash.strip().splitlines()[-1]
        table.add_row(o.case, "loaded" if o.server_ok else "refused", _verdict(o),
                      "[green]yes[/]" if o.agree else "[red]no[/]", "yes" if o.case in known else "",
                      _short(detail, 300))
    console.print(table)
    disagree = {o.case for o in outcomes if not o.agree}
    loaded = sum(o.server_ok for o in outcomes)
    console.print(
        f"{len(outcomes)} cases: server loaded {loaded}, refused {len(outcomes) - loaded}; "
        f"agreement [bold]{agreement_rate(outcomes):.1%}[/] ({len(outcomes) - len(disagree)}/{len(outcomes)})"
        + (f"; {seconds:.0f} s" if seconds is not None else ""))
    if disagree - set(known):
        console.print(f"[red]new disagreements (not in KNOWN_DISAGREEMENTS.md):[/] "
                      f"{', '.join(sorted(disagree - set(known)))}")
    if set(known) - disagree:
        console.print(f"[yellow]listed in KNOWN_DISAGREEMENTS.md but now agreeing:[/] "
                      f"{', '.join(sorted(set(known) - disagree))}")
    drift = [o.case for o in outcomes if not o.server_as_expected]
    if drift:
        console.print(f"[red]the server did not do what corpus.py records (harness or server changed):[/] "
                      f"{', '.join(drift)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.differential.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write every outcome as JSON here")
    parser.add_argument("--markdown", type=Path, help="write the disagreement report (markdown) here")
    parser.add_argument("--all", action="store_true", help="print every case, not only disagreements")
    parser.add_argument("--only", help="run only cases whose name contains this")
    parser.add_argument("--workdir", type=Path, help="keep the generated repositories and server log here")
    args = parser.parse_args(argv)

    cases = build_cases()
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tritonpkg-differential-") as tmp:
        workdir = args.workdir or Path(tmp)
        outcomes = run_corpus(cases, workdir)
    seconds = time.monotonic() - started
    print_report(outcomes, show_all=args.all, seconds=seconds)
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(o) | {"agree": o.agree} for o in outcomes], indent=2))
    if args.markdown:
        args.markdown.write_text(markdown_report(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
