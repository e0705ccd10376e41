"""NVIDIA's multi-LoRA contract: with `enable_lora` in model.json, `<version>/multi_lora.json` maps each adapter's
name to its folder, and a request picks one by `lora_name` in its sampling parameters. The adapters are
numbered in the list's order from 1, as NVIDIA's backend numbers them (one number per folder), and handed to vLLM
as LoRARequests.

The list is followed while the model serves (follow_list): a rewritten multi_lora.json loads the new adapters into
the running engine and drops the old, without a restart (`vllm serve`'s runtime load/unload, from a file).

A relative folder (`./adapters/<name>`, what `tritonpkg package` writes) is resolved against the model version,
so the repository can move; NVIDIA's backend hands the path to vLLM as written (absolute in its samples).
Pure but for vLLM's LoRARequest (imported only when the model has adapters) and the engine handed in:
unit-testable without Triton."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections.abc import Callable
from typing import Any

from contract import ADAPTER_LIST_FILE, ADAPTER_SERVED_FILE
from request_params import ParamError

MULTI_LORA_FILE = ADAPTER_LIST_FILE
MAX_LIST_BYTES = 1 << 20
ADAPTER_POLL_S = float(os.environ.get("TRITONPKG_VLLM_ADAPTER_POLL", "1.0"))


class AdapterError(ValueError):
    """The model's adapter list cannot be served; the message names the file."""


def lora_enabled(engine_args: dict[str, Any]) -> bool:
    """enable_lora as NVIDIA's backend reads it: a bool or the string "true" (any case)."""
    return str(engine_args.get("enable_lora", "")).lower() == "true"


# tritonpkg/adapter_names.py's rule (this module runs without tritonpkg); tests/unit/test_adapter_names.py holds
# the two equal.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_VERSION = re.compile(r"[1-9][0-9]{0,18}")


def name_problem(name: str) -> str | None:
    """Why `name` is not an adapter name (it becomes vLLM's lora_name, an OpenAI model id, a log field)."""
    base, at, version = name.partition("@")
    if not base:
        return "is empty" if not at else "has no name before '@'"
    if not base[0].isascii() or not base[0].isalpha():
        return "does not start with an ASCII letter"
    if _NAME.fullmatch(base) is None:
        return "holds a character other than ASCII letters, digits, '_', '.' or '-'"
    if len(base) > 64:
        return "is longer than 64 characters"
    if at and (_VERSION.fullmatch(version) is None or int(version) > 2**63 - 1):
        return "has an '@' not followed by a model version"
    return None


def read_adapters(version_dir: str, engine_args: dict[str, Any]) -> dict[str, str]:
    """Adapter name -> absolute folder, {} when LoRA is off. LoRA on without the list is an error at load
    (NVIDIA's backend raises FileNotFoundError there too)."""
    return read_list(version_dir, engine_args)[0]


def read_list(version_dir: str, engine_args: dict[str, Any]) -> tuple[dict[str, str], str]:
    """read_adapters, and the sha256 of the bytes read (what the acknowledgement names)."""
    if not lora_enabled(engine_args):
        return {}, ""
    path = os.path.join(version_dir, MULTI_LORA_FILE)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_LIST_BYTES + 1)
    except FileNotFoundError:
        raise AdapterError(f"enable_lora is on but {path} is missing; it lists the LoRA adapters") from None
    if len(raw) > MAX_LIST_BYTES:
        raise AdapterError(f"{path} is larger than {MAX_LIST_BYTES} bytes")
    try:
        entries = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise AdapterError(f"{path}: not valid JSON ({str(exc)[:200]})") from None
    if not isinstance(entries, dict) or not all(isinstance(v, str) and v for v in entries.values()):
        raise AdapterError(f"{path}: expected a JSON object of adapter name -> folder")
    for name in entries:
        why = name_problem(name)
        if why is not None:
            shown = name[:64].encode("unicode_escape").decode("ascii")
            raise AdapterError(f"{path}: adapter name '{shown}' {why}")
    return ({name: folder if os.path.isabs(folder) else os.path.normpath(os.path.join(version_dir, folder))
             for name, folder in entries.items()}, hashlib.sha256(raw).hexdigest())


def acknowledge(version_dir: str, adapters: Adapters, digest: str, log: Callable[[str], None]) -> None:
    """Write the acknowledgement of the list now served (contract: adapter_list.served), renamed into place, where
    one is asked for: only when the file exists already (a rollout creates it before its first list), so a
    repository served in place gains no file. Best effort: the adapters are served all the same."""
    path = os.path.join(version_dir, ADAPTER_SERVED_FILE)
    if not os.path.isfile(path):
        return
    served, refused = adapters.table()
    body = json.dumps({"list_sha256": digest, "served": sorted(served), "refused": refused}, indent=2)
    staged = f"{path}.{os.getpid()}.tmp"
    try:
        with open(staged, "w", encoding="utf-8") as fh:
            fh.write(body + "\n")
        os.replace(staged, path)
    except OSError as exc:
        log(f"cannot write {path} ({exc.strerror}); an adapter rollout waits for it")


class Adapters:
    """The adapters one model serves: name -> LoRARequest, one LoRARequest (one vLLM adapter id) per folder, so
    names that share a folder (an alias such as `support-bot` beside `support-bot@3`) share its loaded weights.

    The list is live: `plan` and `commit` move the model from one multi_lora.json to the next (follow_list), each
    new folder loaded into the engine first (vLLM's `add_lora`, whose failure the engine survives) so that a
    broken adapter never reaches a running batch, where its load error would stop the engine. A name whose
    folder failed to load is refused with the reason; the swap to the new table is one assignment, so a
    request sees the old list or the new one, never a mix."""

    def __init__(self) -> None:
        self.folders: dict[str, str] = {}
        self._table: tuple[dict[str, Any], dict[str, str]] = ({}, {})  # name -> LoRARequest, name -> why not
        self._by_folder: dict[str, Any] = {}
        self._next_id = 1

    def plan(self, folders: dict[str, str]) -> tuple[list[Any], list[Any]]:
        """(a new LoRARequest per folder `folders` adds, to load before it serves; the LoRARequests of the folders it
        drops, to remove after). Ids are reserved here and never reused, so a replaced folder is a new adapter to
        vLLM."""
        new: list[Any] = []
        if folders:
            from vllm.lora.request import LoRARequest

            planned: set[str] = set()
            for name, folder in folders.items():
                if folder not in self._by_folder and folder not in planned:
                    planned.add(folder)
                    new.append(LoRARequest(name, self._next_id + len(new), folder))
        self._next_id += len(new)
        kept = set(folders.values())
        return new, [r for folder, r in self._by_folder.items() if folder not in kept]

    def commit(self, folders: dict[str, str], loaded: list[Any], failed: dict[str, str]) -> None:
        """Serve `folders` from now on: `loaded` are the plan's new LoRARequests the engine took, `failed` folder ->
        why the engine refused it."""
        wanted = set(folders.values())
        by_folder = {f: r for f, r in self._by_folder.items() if f in wanted}
        by_folder.update({r.lora_path: r for r in loaded})
        requests = {name: by_folder[folder] for name, folder in folders.items() if folder in by_folder}
        refused = {name: failed.get(folder, "not loaded") for name, folder in folders.items()
                   if folder not in by_folder}
        self._by_folder, self.folders = by_folder, dict(folders)
        self._table = (requests, refused)

    def table(self) -> tuple[list[str], dict[str, str]]:
        """(the names served, name -> why refused), one snapshot."""
        requests, refused = self._table
        return list(requests), dict(refused)

    def take(self, params: dict[str, Any]) -> Any:
        """The LoRARequest `params["lora_name"]` selects (removed from `params`); None without one."""
        name = params.pop("lora_name", None)
        if name is None:
            return None
        if not isinstance(name, str):
            raise ParamError(f"sampling parameter 'lora_name' must be a string, got {type(name).__name__}")
        requests, refused = self._table
        request = requests.get(name)
        if request is not None:
            return request
        shown = name if len(name) <= 64 else name[:64] + "..."
        known = ", ".join(repr(n) for n in requests) or "none (enable_lora is off)"
        if name in refused:
            raise ParamError(f"LoRA adapter {shown!r} in 'lora_name' is listed in {MULTI_LORA_FILE} but its folder "
                             f"could not be loaded ({refused[name]}); this model serves: {known}")
        raise ParamError(f"unknown LoRA adapter {shown!r} in 'lora_name'; this model serves: {known}")


async def apply_list(adapters: Adapters, folders: dict[str, str], engine: Any, log: Callable[[str], None]) -> None:
    """Move `adapters` to `folders`: load each new folder into the engine, swap the table, remove what it dropped
    (a request still running on a removed adapter has vLLM load it again from its folder at its next step)."""
    new, dropped = adapters.plan(folders)
    loaded, failed = [], {}
    for request in new:
        try:
            if not os.path.isdir(request.lora_path):
                raise FileNotFoundError(f"no folder {request.lora_path}")
            await engine.add_lora(request)
            loaded.append(request)
        except Exception as exc:  # vLLM returns the worker's error; the engine goes on serving
            why = failed[request.lora_path] = f"{type(exc).__name__}: {str(exc)[:300]}"
            log(f"LoRA adapter {request.lora_name!r} ({request.lora_path}) could not be loaded: {why}")
    adapters.commit(folders, loaded, failed)
    for request in dropped:
        try:
            await engine.remove_lora(request.lora_int_id)
        except Exception as exc:
            log(f"LoRA adapter {request.lora_name!r} could not be removed: {type(exc).__name__}: {exc}")


def list_signature(version_dir: str) -> tuple[int, int, int] | None:
    """What changes when multi_lora.json is rewritten (in place or by a rename onto it)."""
    try:
        st = os.stat(os.path.join(version_dir, MULTI_LORA_FILE))
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


async def follow_list(adapters: Adapters, version_dir: str, engine_args: dict[str, Any], engine: Any,
                      closing: Callable[[], bool], log: Callable[[str], None],
                      interval: float = ADAPTER_POLL_S, seen: Any = None) -> None:
    """Serve multi_lora.json as it is rewritten (an adapter rollout: tritonpkg deploy, or an operator's rename onto
    it), without restarting the engine, acknowledging each list applied. A list that cannot be read leaves the
    adapters served as they were (and unacknowledged). `seen`: the list's signature when it was last read."""
    seen = list_signature(version_dir) if seen is None else seen
    while not closing():
        await asyncio.sleep(interval)
        now = list_signature(version_dir)
        if now == seen:
            continue
        seen = now
        try:
            folders, digest = read_list(version_dir, engine_args)
        except AdapterError as exc:
            log(f"{exc}; the adapters served stay as they were")
            continue
        await apply_list(adapters, folders, engine, log)
        acknowledge(version_dir, adapters, digest, log)
        log(f"LoRA adapters now served from {MULTI_LORA_FILE}: {sorted(adapters.folders)}")
