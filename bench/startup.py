"""Benchmark: time from `tritonpkg serve` to every model ready, when the weights must first be downloaded
from the S3 endpoint at start-up against when they are already materialized on the local file system.

    .venv/bin/python bench/startup.py [--pad-mib 400] [--rounds 1]

The tiny LLM's weights (plus `--pad-mib` of extra data under the same prefix, standing in for the bytes of
a real checkpoint: vLLM loads only the safetensors, the materializer copies and verifies everything) are
uploaded to a moto S3 server. Each round serves the same package three ways through `ServingStack` (the
library behind `tritonpkg serve`), one after the other:

  cold S3      weights root empty: start-up materializes from S3 (download, sha256, fsync, rename), then Triton
  materialized weights root already holds the revision: start-up only finds the READY marker, then Triton
  local path   the spec names a local folder: no weights step at all (the floor)

moto on loopback is CPU-bound on this machine: the download leg is far slower than S3 or FSx would be, and
the vLLM engine start (the same in all three) dominates. The table shows the weights step and the total.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from tritonpkg.devtools.s3 import MotoS3

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny-llm"
BUCKET = "bench-startup"
PREFIX = "tiny-llm"
MiB = 1 << 20


def upload_weights(server: MotoS3, weights: Path, pad_mib: int) -> int:
    s3 = server.client()
    s3.create_bucket(Bucket=BUCKET)
    total = 0
    for path in sorted(weights.rglob("*")):
        if path.is_file():
            s3.upload_file(str(path), BUCKET, f"{PREFIX}/{path.relative_to(weights).as_posix()}")
            total += path.stat().st_size
    if pad_mib:
        pad = weights.parent / "padding.dat"
        with pad.open("wb") as out:
            for _ in range(pad_mib):
                out.write(os.urandom(MiB))
        s3.upload_file(str(pad), BUCKET, f"{PREFIX}/extra/padding.dat")
        total += pad.stat().st_size
        pad.unlink()
    return total


def package(work: Path, name: str, weights: str) -> Path:
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    spec = yaml.safe_load((TINY / "tritonpkg.yaml").read_text())
    spec["weights"] = weights
    folder = work / f"spec-{name}"
    folder.mkdir()
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    repo = work / f"repo-{name}"
    package_spec(load_spec(folder), repo)
    return repo


def serve_once(repo: Path, weights_root: Path, state: Path) -> dict[str, float]:
    from tritonpkg.runtime import ensure_runtime
    from tritonpkg.serve import ServingStack, StartupOptions

    options = StartupOptions(source=repo, http_port=0, grpc_port=0, metrics_port=0, openai_port=0, openai=False,
                             weights_root=weights_root, state_dir=state, startup_timeout=900)
    stack = ServingStack(options, runtime=ensure_runtime())
    try:
        stack.start()
        return {"total": stack.startup_seconds or 0.0, "weights": stack.timings.get("weights", 0.0),
                "triton": stack.timings.get("triton", 0.0)}
    finally:
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pad-mib", type=int, default=400, help="extra MiB under the weights prefix")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", metavar="OUT", help="also write the table's figures here (as JSON)")
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    server = MotoS3.start(work / "moto.log")
    os.environ.update(server.env)
    console = Console()
    try:
        weights = work / "weights"
        subprocess.run([sys.executable, str(TINY / "make_tiny_llm.py"), "--out", str(weights)], check=True,
                       capture_output=True, timeout=300)
        size = upload_weights(server, weights, args.pad_mib)
        remote = package(work, "s3", f"s3://{BUCKET}/{PREFIX}")
        local = package(work, "local", str(weights))
        runs: dict[str, list[dict[str, float]]] = {"cold S3": [], "materialized": [], "local path": []}
        for r in range(args.rounds):
            root = work / f"weights-root-{r}"
            for case, repo, fresh in (("cold S3", remote, True), ("materialized", remote, False),
                                      ("local path", local, False)):
                if fresh and root.exists():
                    shutil.rmtree(root)
                state = work / f"state-{r}-{case.replace(' ', '-')}"
                console.print(f"round {r + 1}: {case} ...", highlight=False)
                runs[case].append(serve_once(repo, root, state))
                shutil.rmtree(state, ignore_errors=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    def med(case: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[case])

    table = Table("start-up", "weights step s", "Triton + vLLM s", "serve -> ready s", "vs materialized",
                  title=f"serve -> ready, {size / MiB:.0f} MiB of weights on a moto S3 endpoint "
                        f"(median of {args.rounds})", header_style="bold")
    base = med("materialized", "total")
    for case in runs:
        total = med(case, "total")
        table.add_row(case, f"{med(case, 'weights'):.2f}", f"{med(case, 'triton'):.1f}", f"{total:.1f}",
                      f"{total / base:.2f}x")
    console.print(table)
    download = med("cold S3", "weights")
    console.print(f"downloading at start-up adds {download - med('materialized', 'weights'):.1f} s "
                  f"({size / MiB / max(download, 1e-9):.0f} MiB/s from this endpoint); a materialized start "
                  f"checks the READY marker in {med('materialized', 'weights') * 1000:.0f} ms", highlight=False)
    from tritonpkg.benchmarks import results

    results.write(args.json, "bench/startup.py", {"pad_mib": args.pad_mib, "rounds": args.rounds}, {
        "weights_mib": size / MiB,
        "cases": {case: {"weights_s": med(case, "weights"), "triton_s": med(case, "triton"),
                         "total_s": med(case, "total"), "vs_materialized": med(case, "total") / base}
                  for case in runs}})


if __name__ == "__main__":
    main()
