"""Run inside a lane's venv (that release's vLLM): what vLLM itself does with each model.json.

    <lane>/bin/python tests/lanes/engine_probe.py < cases.json > verdicts.json

cases.json: {"name": {engine args}, ...}. Each case is what the toolkit's vllm backend does at load:
`AsyncEngineArgs(**json)` then `create_engine_config()` (the step that checks every config class). The
answer is {"vllm": version, "verdicts": {"name": null (accepted) | "ExceptionType: message"}}. Imports only
vLLM and the standard library: the lane has no tritonpkg."""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def main() -> int:
    from importlib import metadata

    from vllm.engine.arg_utils import AsyncEngineArgs

    cases = json.load(sys.stdin)
    verdicts: dict[str, str | None] = {}
    for name, args in cases.items():
        try:
            AsyncEngineArgs(**args).create_engine_config()
            verdicts[name] = None
        except BaseException as exc:  # any refusal is the verdict, SystemExit included
            if isinstance(exc, KeyboardInterrupt):
                raise
            verdicts[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    version = next((metadata.version(d) for d in ("vllm-cpu", "vllm") if _has(metadata, d)), None)
    json.dump({"vllm": version, "verdicts": verdicts}, sys.stdout, indent=1, sort_keys=True)
    return 0


def _has(metadata, dist: str) -> bool:
    try:
        metadata.version(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
