"""The benchmark plots in docs/img/bench-*.svg, drawn from the benches' own results files (bench/results/*.json,
written by each bench's `--json OUT`): a new run's file replaces the old one and `scripts/gen_docs.py --pictures`
redraws. SVG without a date and with a fixed hash salt, so the same file always draws the same bytes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path("bench") / "results"


def load(root: Path, name: str) -> dict[str, Any]:
    """bench/results/NAME.json, checked to be one bench's record (tritonpkg.benchmarks.results)."""
    path = root / RESULTS / f"{name}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for key in ("bench", "date", "results"):
        if key not in data:
            raise ValueError(f"{path}: no {key!r} (expected a record written by a bench's --json)")
    return data


def _source(ax: Any, data: dict[str, Any]) -> None:
    cmd = " ".join([data["bench"], *data["argv"]])
    host = data["host"]
    where = f"{data['date'][:10]}, {host['cpus']} CPUs, 1-minute load average {host['load_average_1m']}"
    ax.annotate(f"{cmd}  ({where})", xy=(0, 0), xycoords="figure fraction",
                xytext=(4, 3), textcoords="offset points", fontsize=7, color="grey")


def vllm_serving(plt: Any, data: dict[str, Any]) -> list[tuple[str, Any]]:
    """Tokens/s and TTFT p50 of both servers per concurrency; CPU per output token by process."""
    res = data["results"]
    levels = res["levels"]
    other = res["other"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    x = list(range(len(levels)))
    for ax, key, unit in ((a1, "tok_s", "output tokens/s"), (a2, "ttft_p50_ms", "TTFT p50 ms")):
        for i, (who, label) in enumerate((("triton", "Triton (tritonpkg)"), ("other", other))):
            vals = [lv[key][who] for lv in levels]
            bars = ax.bar([v - 0.2 + 0.4 * i for v in x], vals, width=0.38, label=label)
            ax.bar_label(bars, fmt="%.0f", fontsize=7)
        ax.set_xticks(x, [f"{lv['concurrency']} concurrent" for lv in levels])
        ax.set_ylabel(unit)
        ax.legend(fontsize=8)
    a1.set_title("throughput (higher is better)")
    a2.set_title("time to first token (lower is better)")
    fig.suptitle(f"tiny LLM, streaming: Triton + tritonpkg's vLLM backend vs {other}")
    _source(a1, data)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    out = [("bench-vllm-serving.svg", fig)]

    cpu = res["cpu_ms_per_token"]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    kinds = [k for k in ("triton", "vllm") if k in cpu]
    roles: list[str] = []
    for k in kinds:
        roles += [r for r in cpu[k]["by_process"] if r not in roles]
    lefts = [0.0] * len(kinds)
    names = [cpu[k]["name"] for k in kinds]
    for role in roles:
        vals = [cpu[k]["by_process"].get(role, 0.0) for k in kinds]
        ax.barh(names, vals, left=lefts, label=role)
        lefts = [a + b for a, b in zip(lefts, vals, strict=True)]
    for i, k in enumerate(kinds):
        ax.text(lefts[i] + 0.01, i, f"{cpu[k]['all']:.3f} ms (wall x cores {cpu[k]['wall_x_cores']:.3f})",
                va="center", fontsize=8)
    ax.set_xlim(0, max(lefts) * 1.45)
    ax.set_xlabel(f"CPU ms per output token at {cpu['concurrency']} streams")
    ax.set_title("Where the CPU goes per token, by process")
    ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    _source(ax, data)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    out.append(("bench-cpu-per-token.svg", fig))
    return out


def step_cancel(plt: Any, data: dict[str, Any]) -> list[tuple[str, Any]]:
    """tritonpkg against itself with one environment variable changed: tok/s and TTFT p50, A over B."""
    res = data["results"]
    levels = res["levels"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    x = list(range(len(levels)))
    for i, (key, label) in enumerate((("tok_s_ratio", "tokens/s, A / B"), ("ttft_p50_ratio", "TTFT p50, A / B"))):
        bars = ax.bar([v - 0.2 + 0.4 * i for v in x], [lv[key] for lv in levels], width=0.38, label=label)
        ax.bar_label(bars, fmt="%.2fx", fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(x, [f"{lv['concurrency']} concurrent" for lv in levels])
    ax.set_ylim(0, 1.5)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"A: tritonpkg's default, B: {res['other']} (ratio, 1.0 = same)", fontsize=10)
    _source(ax, data)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return [("bench-cancel-poll.svg", fig)]


def materialize(plt: Any, data: dict[str, Any]) -> list[tuple[str, Any]]:
    """Median wall seconds per client, with tritonpkg's speed against awscli's."""
    res = data["results"]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    names = list(res["seconds"])
    bars = ax.barh(names, [res["seconds"][n] for n in names],
                   color=["C1" if n.startswith("tritonpkg") else "C0" for n in names])
    ax.bar_label(bars, fmt="%.2f s", fontsize=8, padding=2)
    ax.invert_yaxis()
    ax.set_xlim(0, max(res["seconds"].values()) * 1.25)
    ax.set_xlabel("wall seconds, process start included (median of the rounds)")
    ax.set_title(f"materialize {res['megabytes']:.0f} MB from a moto S3 endpoint: {res['cold_vs_awscli']:.2f}x "
                 f"awscli's defaults, {res['like_for_like']:.2f}x like for like", fontsize=10)
    _source(ax, data)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return [("bench-materialize.svg", fig)]


def engine_death(plt: Any, data: dict[str, Any]) -> list[tuple[str, Any]]:
    """Seconds from the engine's SIGKILL until each readiness endpoint said not ready, per kill."""
    res = data["results"]["not_ready_after_s"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    names = list(res)
    for i, name in enumerate(names):
        kills = [k for k in res[name]["kills"] if k is not None]
        ax.scatter(kills, [i] * len(kills), color="C0", zorder=3)
        if res[name]["p50"] is not None:
            ax.scatter([res[name]["p50"]], [i], marker="|", s=300, color="C1", zorder=4)
    ax.set_yticks(range(len(names)), names)
    ax.axvline(2.0, color="grey", lw=0.8, ls="--")
    longest = max((k for name in names for k in res[name]["kills"] if k is not None), default=0.0)
    ax.set_xlim(0, max(2.2, longest * 1.1))
    ax.set_xlabel("seconds from SIGKILL to not ready (dots: kills, bar: p50; dashed: the 2 s bar)")
    ax.set_title(f"Readiness after the engine dies, {len(res[names[0]]['kills'])} kills")
    _source(ax, data)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return [("bench-engine-death.svg", fig)]


def haproxy_replay(plt: Any, data: dict[str, Any]) -> list[tuple[str, Any]]:
    """p50 and p99 per request through each HAProxy configuration, per client kind."""
    rows = data["results"]["rows"]
    clients = sorted({r["client"] for r in rows})
    configs = sorted({r["configuration"] for r in rows})
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, key in ((a1, "p50_ms"), (a2, "p99_ms")):
        for i, conf in enumerate(configs):
            vals = [next(r[key] for r in rows if r["client"] == c and r["configuration"] == conf) for c in clients]
            bars = ax.bar([j - 0.2 + 0.4 * i for j in range(len(clients))], vals, width=0.38, label=conf)
            ax.bar_label(bars, fmt="%.3f", fontsize=7)
        ax.set_xticks(range(len(clients)), clients)
        ax.set_ylabel(key.replace("_ms", " ms"))
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("HAProxy in front of an echo unit: request bodies held whole vs forwarded as they come")
    _source(a1, data)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return [("bench-haproxy-replay.svg", fig)]


PLOTS: dict[str, Callable[[Any, dict[str, Any]], list[tuple[str, Any]]]] = {
    "vllm_serving": vllm_serving, "vllm_serving_step_cancel": step_cancel, "materialize": materialize,
    "engine_death": engine_death, "haproxy_replay": haproxy_replay}


def plots(root: Path, img: Path) -> list[Path]:
    """Every plot whose results file is in bench/results/, written into `img`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "tritonpkg-docs", "svg.fonttype": "path", "font.size": 10})
    meta: dict[str, object] = {"Date": None,
                              "Creator": f"tritonpkg/devtools/bench_plots.py, matplotlib {matplotlib.__version__}"}
    img.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in PLOTS.items():
        if not (root / RESULTS / f"{name}.json").exists():
            continue
        for filename, fig in draw(plt, load(root, name)):
            fig.savefig(img / filename, format="svg", metadata=meta)
            plt.close(fig)
            written.append(img / filename)
    return written
