"""Benchmark: `tritonpkg materialize` against `aws s3 cp --recursive` and a plain boto3 `download_file`
loop, same bucket on one moto server started here, same run; plus the warm re-run against the cold one.

    .venv/bin/python bench/materialize.py [--mib 256] [--files 4] [--rounds 2] [--concurrency 8] [--json OUT]

moto on loopback is CPU-bound and shares the machine's cores with the client being measured: the figures
compare the clients under the same constraint, they are not the throughput of a real S3 or FSx link.
moto also reads the whole object for every ranged GET, so a client's part size decides moto's work
(awscli's 8 MiB parts of a 512 MiB object cost 64 whole-object reads): the row "aws s3 cp, same parts"
runs awscli with tritonpkg's part size and concurrency (from its `--json` summary), the like-for-like
comparison of the two clients."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tritonpkg.devtools.s3 import MotoS3

MiB = 1 << 20
BUCKET = "bench-models"


def upload(server: MotoS3, mib: int, files: int) -> int:
    from boto3.s3.transfer import TransferConfig

    s3 = server.client()
    s3.create_bucket(Bucket=BUCKET)
    size = mib * MiB // files
    total = 0
    for i in range(files):
        data = os.urandom(size)
        s3.upload_fileobj(io.BytesIO(data), BUCKET, f"model/model-{i:05d}.safetensors",
                          Config=TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB))
        total += size
    for i, body in enumerate((b'{"architectures": ["LlamaForCausalLM"]}', os.urandom(2 * MiB), b"{}")):
        s3.put_object(Bucket=BUCKET, Key=f"model/small-{i}.json", Body=body)
        total += len(body)
    return total


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed: {out.stderr[-2000:]}")
    return time.monotonic() - start, out.stdout


def run_awscli(server: MotoS3, dest: Path, env, part_size: int | None = None, concurrency: int | None = None) -> float:
    """awscli with its defaults (8 MiB parts, 10 requests), or with the given part size and concurrency."""
    if part_size is not None:
        config = dest.parent / "awscli-config"
        config.write_text(f"[default]\ns3 =\n  multipart_chunksize = {part_size}\n"
                          f"  multipart_threshold = {part_size}\n  max_concurrent_requests = {concurrency}\n")
        env = {**env, "AWS_CONFIG_FILE": str(config)}
    return timed(["aws", "s3", "cp", "--recursive", "--only-show-errors", "--endpoint-url", server.endpoint,
                  f"s3://{BUCKET}/model", str(dest)], env)[0]


BOTO3_LOOP = """
import os, sys, time, boto3
dest = sys.argv[1]
s3 = boto3.client("s3")
start = time.monotonic()
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=%r, Prefix="model/"):
    for obj in page.get("Contents", []):
        s3.download_file(%r, obj["Key"], os.path.join(dest, obj["Key"].split("/")[-1]))
"""


def run_boto3(dest: Path, env) -> float:
    dest.mkdir(parents=True, exist_ok=True)
    return timed([sys.executable, "-c", BOTO3_LOOP % (BUCKET, BUCKET), str(dest)], env)[0]


def run_tritonpkg(root: Path, env, concurrency: int, part_size: str) -> tuple[float, dict]:
    wall, out = timed([sys.executable, "-m", "tritonpkg", "materialize", f"s3://{BUCKET}/model", "--to", str(root),
                       "--concurrency", str(concurrency), "--part-size", part_size, "--json"], env)
    return wall, json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="total size of the large files")
    ap.add_argument("--files", type=int, default=4, help="number of large (multipart) files")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--part-size", default="auto")
    ap.add_argument("--json", metavar="OUT", help="also write the table's figures here (as JSON)")
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    console = Console()
    work = Path(tempfile.mkdtemp(prefix="bench-materialize-"))
    server = MotoS3.start(work / "moto.log")
    env = {**os.environ, **server.env}
    try:
        total = upload(server, args.mib, args.files)
        console.print(f"{total / 1e6:.0f} MB in {args.files + 3} objects on {server.endpoint} "
                      f"({os.cpu_count()} CPUs shared by moto and the client)")
        matched = "aws s3 cp, same parts as tritonpkg"
        times: dict[str, list[float]] = {"aws s3 cp --recursive": [], "boto3 download_file loop": [],
                                         "tritonpkg materialize (cold)": [], "tritonpkg materialize (warm)": [],
                                         matched: []}
        internal: list[float] = []
        warm_internal: list[float] = []
        part_sizes: list[int] = []
        for r in range(args.rounds):
            for name in times:
                dest = work / f"r{r}-{name.split()[0]}"
                if name == "aws s3 cp --recursive":
                    times[name].append(run_awscli(server, dest, env))
                elif name == matched:
                    times[name].append(run_awscli(server, dest, env, part_sizes[-1], args.concurrency))
                elif name.startswith("boto3"):
                    times[name].append(run_boto3(dest, env))
                elif name.endswith("(cold)"):
                    wall, summary = run_tritonpkg(work / f"root-{r}", env, args.concurrency, args.part_size)
                    assert summary["bytes_downloaded"] == total and not summary["reused"]
                    times[name].append(wall)
                    internal.append(summary["seconds"])
                    part_sizes.append(summary["part_size"])
                else:
                    wall, summary = run_tritonpkg(work / f"root-{r}", env, args.concurrency, args.part_size)
                    assert summary["reused"] and summary["bytes_downloaded"] == 0
                    times[name].append(wall)
                    warm_internal.append(summary["seconds"])
                shutil.rmtree(dest, ignore_errors=True)
            for r_root in work.glob("root-*"):
                shutil.rmtree(r_root, ignore_errors=True)

        base = statistics.median(times["aws s3 cp --recursive"])
        cold = statistics.median(times["tritonpkg materialize (cold)"])
        table = Table(title=f"materialize {total / 1e6:.0f} MB from S3 (moto on loopback), median of {args.rounds}, "
                            "wall time including process start", header_style="bold")
        for col in ("client", "seconds", "MB/s", "speed vs awscli"):
            table.add_column(col, justify="right" if col != "client" else "left")
        for name, values in times.items():
            t = statistics.median(values)
            speed = f"{base / t:.2f}x" if "warm" not in name else f"{100 * t / cold:.1f}% of cold"
            table.add_row(name, f"{t:.2f}", f"{total / 1e6 / t:.0f}" if "warm" not in name else "-", speed)
        console.print(table)
        console.print(f"like for like (awscli with tritonpkg's part size and concurrency): tritonpkg cold is "
                      f"{statistics.median(times[matched]) / cold:.2f}x as fast")
        console.print(f"tritonpkg's own timer for the cold copy (no interpreter start): "
                      f"{statistics.median(internal):.2f} s = {total / 1e6 / statistics.median(internal):.0f} MB/s "
                      f"(concurrency {args.concurrency}, part size {part_sizes[-1] / MiB:g} MiB, "
                      f"sha256 of every byte included); "
                      f"warm re-run by the same timer: {statistics.median(warm_internal) * 1000:.0f} ms = "
                      f"{100 * statistics.median(warm_internal) / statistics.median(internal):.1f}% of cold")
        from tritonpkg.benchmarks import results

        results.write(args.json, "bench/materialize.py", {k: v for k, v in vars(args).items() if k != "json"}, {
            "megabytes": total / 1e6, "objects": args.files + 3, "part_size_mib": part_sizes[-1] / MiB,
            "seconds": {name: statistics.median(values) for name, values in times.items()},
            "cold_vs_awscli": base / cold, "like_for_like": statistics.median(times[matched]) / cold,
            "warm_percent_of_cold": {"wall": 100 * statistics.median(times["tritonpkg materialize (warm)"]) / cold,
                                     "own_timer": 100 * statistics.median(warm_internal) / statistics.median(internal)},
            "rounds_seconds": times})
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
