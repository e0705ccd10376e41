"""Record what `vllm serve --enable-auto-tool-choice --tool-call-parser pythonic` answers to chat requests with
tools, streamed and not, for every tool_choice (auto, required, a named tool, none), on the tiny LLM with the
engine settings bench/vllm_serving.py gives it (the shared Triton's): tests/support/vllm_tool_streams.json, which
tests/integration/test_openai_tool_streams.py compares the frontend's chunks with.

    .venv/bin/python -m tests.support.vllm_tool_streams [--out FILE]

Ids and timestamps are replaced by placeholders; everything else is kept as vLLM sent it."""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT
from tests.support.repositories import make_tiny_llm

RECORDING = Path(__file__).with_name("vllm_tool_streams.json")
PARSER = "pythonic"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
                   "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "additionalProperties": False, "required": ["tz"],
                                       "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}}}}}
BASE = {"model": "tiny_llm", "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER, TIME], "max_tokens": 48, "temperature": 0}
CHOICES: dict[str, Any] = {"auto": "auto", "required": "required", "none": "none",
                           "named": {"type": "function", "function": {"name": "get_weather"}}}


def requests() -> dict[str, dict[str, Any]]:
    """name -> chat request body: each tool_choice, streamed and not."""
    out = {}
    for name, choice in CHOICES.items():
        for stream in (False, True):
            out[f"{name}{'_stream' if stream else ''}"] = {**copy.deepcopy(BASE), "tool_choice": choice,
                                                           "stream": stream}
    return out


def post(url: str, body: dict[str, Any]) -> Any:
    """The answer: a body, or a stream's chunks (each parsed; [DONE] last, as the string)."""
    request = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        raw = response.read().decode()
    if not body.get("stream"):
        return json.loads(raw)
    events = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    return [event if event == "[DONE]" else json.loads(event) for event in events]


def anonymous(value: Any) -> Any:
    """Ids, timestamps and fingerprints as placeholders: they differ run to run."""
    if isinstance(value, list):
        return [anonymous(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key == "id" and isinstance(item, str):
            out[key] = "<id>"
        elif key in ("created", "system_fingerprint") and item is not None:
            out[key] = f"<{key}>"
        else:
            out[key] = anonymous(item)
    return out


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_vllm_serving", ROOT / "bench" / "vllm_serving.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@contextlib.contextmanager
def vllm_serve(weights: Path):
    """`vllm serve` as bench/vllm_serving.py starts it, with the pythonic tool-call parser."""
    from tritonpkg.proc.group import own_group, stop_popen
    from tritonpkg.proc.ports import free_port

    bench = _bench()
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(weights), "--port", str(port),
           "--host", "127.0.0.1", "--served-model-name", "tiny_llm", "--enable-auto-tool-choice",
           "--tool-call-parser", PARSER]
    for key, value in bench.ENGINE.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            cmd += [flag] if value else [] if key == "disable_log_stats" else [f"--no-{key.replace('_', '-')}"]
        else:
            cmd += [flag, str(value)]
    log = Path(tempfile.gettempdir()) / f"vllm-tool-streams-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ,
                                "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")},
                                **own_group())
    try:
        try:
            bench.wait_http(f"http://127.0.0.1:{port}/health", 900, proc)
        except RuntimeError as exc:
            raise RuntimeError(f"vllm serve: {exc}; log: {log}\n{log.read_text()[-3000:]}") from None
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_popen(proc, grace=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RECORDING)
    args = parser.parse_args()
    import vllm

    with tempfile.TemporaryDirectory() as work:
        weights = make_tiny_llm(Path(work) / "weights")
        with vllm_serve(weights) as url:
            answers = {name: anonymous(post(url, body)) for name, body in requests().items()}
    recording = {"vllm": vllm.__version__, "tool_call_parser": PARSER, "requests": requests(), "answers": answers}
    args.out.write_text(json.dumps(recording, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
