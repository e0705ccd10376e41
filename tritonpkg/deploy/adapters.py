"""Adapter rollouts: a release whose only change from the live unit is its LoRA adapters is rolled out into the
running engine (the vLLM backend follows its version's multi_lora.json), never by a new unit.

What is compared is the packaged model, as files: config.pbtxt and every file of the version but the adapters,
their list and the engine arguments the adapters set (max_loras, max_cpu_loras, max_lora_rank: a lower rank
still fits the live engine, a higher one does not). An adapter's identity is its files' sha256 (one copied into
the version) or its source URL (a remote one: a new revision is a new URL). The lists a rollout writes are
computed here too. Each side's facts are taken once: the release's when it is made (release.py), the live unit's
as recorded when it was provisioned, so planning compares recorded facts and reads no other release's files;
reading files is the only effect, in `read_facts`, `repository_files` and `served_list` (a local unit's list, read
by its driver when it starts the unit)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tritonpkg import version_files
from tritonpkg.deploy.plan import Unit
from tritonpkg.errors import TritonpkgError

MULTI_LORA = version_files.MULTI_LORA
SERVED = version_files.SERVED  # the backend's acknowledgement: state, not the release
ADAPTERS_DIR = "adapters"
ADAPTER_ARGS = ("max_loras", "max_cpu_loras", "max_lora_rank")
MAX_FILES_BYTES = 1 << 34  # a version's files read for the comparison (adapters included): 16 GiB


class AdapterFacts(BaseModel):
    """One packaged model version, as an adapter rollout compares it."""

    model: str
    version: int
    lora: bool
    rest: dict[str, str] = Field(description="config.pbtxt and the version's other files -> sha256")
    engine_args: dict[str, Any] = Field(description="model.json without the adapter-sized arguments")
    max_lora_rank: int | None = None
    adapters: dict[str, str] = Field(default_factory=dict, description="name -> identity (files' or source's sha256)")
    listing: dict[str, Any] = Field(default_factory=dict, description="multi_lora.json as packaged: name -> "
                                    "folder (relative ones: to the version) or source")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def facts(model: str, version: int, files: Mapping[str, bytes]) -> AdapterFacts:
    """From the model's files (paths relative to the repository: `<model>/config.pbtxt`, `<model>/<version>/...`)."""
    prefix = f"{model}/{version}/"
    args = _object(version_files.engine_args, files.get(prefix + version_files.ENGINE_ARGS))
    listing = _object(version_files.adapter_list, files.get(prefix + MULTI_LORA))
    adapters = {}
    for name, location in listing.items():
        if isinstance(location, str) and location.startswith(f"./{ADAPTERS_DIR}/"):
            inside = prefix + location.removeprefix("./").rstrip("/") + "/"
            adapters[name] = _sha(json.dumps(sorted((p.removeprefix(inside), _sha(d)) for p, d in files.items()
                                                    if p.startswith(inside))).encode())
        else:
            adapters[name] = _sha(json.dumps(location).encode())
    skipped = (prefix + MULTI_LORA, prefix + version_files.ENGINE_ARGS, prefix + SERVED)
    rest = {p.removeprefix(prefix) if p.startswith(prefix) else p: _sha(d) for p, d in files.items()
            if p == f"{model}/config.pbtxt" or (p.startswith(prefix) and p not in skipped
                                                 and not p.startswith(prefix + ADAPTERS_DIR + "/"))}
    rank = args.get("max_lora_rank")
    return AdapterFacts(model=model, version=version, lora=version_files.lora_enabled(args),
                        rest=rest, engine_args={k: v for k, v in args.items() if k not in ADAPTER_ARGS},
                        max_lora_rank=rank if isinstance(rank, int) else None, adapters=adapters, listing=listing)


def read_facts(repository: Path, model: str, version: int) -> AdapterFacts | Refusal:
    """A packaged model version's facts, read from its repository, or why they cannot be compared."""
    try:
        return facts(model, version, repository_files(repository, model, version))
    except (OSError, ValueError, TritonpkgError) as exc:
        return Refusal(why=[f"the releases cannot be compared: {exc}"])


def _object(parse: Callable[[bytes], dict[str, Any]], data: bytes | None) -> dict[str, Any]:
    """A file's object; {} for a file that is missing or holds another JSON value (LoRA then reads as off)."""
    if data is None:
        return {}
    try:
        return parse(data)
    except version_files.NotAnObjectError:
        return {}


def only_adapters_changed(live: AdapterFacts, new: AdapterFacts) -> list[str]:
    """Why `new` cannot be rolled out into the live engine as an adapter change ([]: it can)."""
    why = []
    if not (live.lora and new.lora):
        why.append("LoRA is off in the " + ("live" if not live.lora else "new") + " release")
    if live.engine_args != new.engine_args:
        keys = sorted(k for k in set(live.engine_args) | set(new.engine_args)
                      if live.engine_args.get(k) != new.engine_args.get(k))
        why.append(f"engine arguments differ: {', '.join(keys)}")
    if new.max_lora_rank is not None and (live.max_lora_rank or 16) < new.max_lora_rank:
        why.append(f"max_lora_rank {new.max_lora_rank} is above the live engine's {live.max_lora_rank or 16}")
    if live.rest != new.rest:
        paths = sorted(p for p in set(live.rest) | set(new.rest) if live.rest.get(p) != new.rest.get(p))
        why.append(f"files differ: {', '.join(paths[:5])}" + (" ..." if len(paths) > 5 else ""))
    if live.adapters == new.adapters:
        why.append("the adapters are the same")
    return why


class Lists(BaseModel):
    """The three lists an adapter rollout writes into the live `unit`, each a whole multi_lora.json (name ->
    absolute folder), the adapters the canary asks by name, and the list it served (written back on failure)."""

    unit: str = ""
    served: dict[str, str] = Field(default_factory=dict)
    load: dict[str, str]
    alias: dict[str, str]
    final: dict[str, str]
    canaries: list[str]
    summary: str
    ids: dict[str, str] = Field(default_factory=dict, description="the new release's adapter identities")


def rollout_lists(live: Mapping[str, str], live_ids: Mapping[str, str], new_folders: Mapping[str, str],
                  new_ids: Mapping[str, str], version: int) -> Lists:
    """`live`: the served list; `new_folders`/`new_ids`: the new release's adapters. Each new adapter is first served
    as `<name>@<version>` beside everything live (load), its canary asked by that name; then `<name>` moves to it
    (alias) while the old folders stay served for the grace period; then only the new names stay (final). An
    adapter whose identity did not change keeps its live folder (nothing to load)."""
    fresh = {}
    for name, folder in new_folders.items():
        unchanged = name in live and live_ids.get(name) == new_ids.get(name)
        fresh[name] = live[name] if unchanged else folder
    versioned = {f"{name}@{version}": folder for name, folder in fresh.items()}
    clash = sorted(set(versioned) & set(new_folders))
    if clash:
        raise TritonpkgError(f"adapter names {clash} are spelt like a versioned name", field="adapters",
                             expected="names without '@<version>'")
    load = {**live, **versioned}
    alias = {**load, **fresh}
    final = {**fresh, **versioned}
    changed = sorted(n for n in new_folders if fresh[n] != live.get(n))
    retired = sorted(n for n in live if n not in final)
    canaries = [f"{n}@{version}" for n in changed]
    summary = (f"load {', '.join(canaries) or 'nothing'}; alias {', '.join(sorted(fresh)) or '-'}"
               + (f"; retire {', '.join(retired)}" if retired else ""))
    return Lists(served=dict(live), load=load, alias=alias, final=final, canaries=canaries, summary=summary,
                 ids=dict(new_ids))


class Refusal(BaseModel):
    """Why a release is no adapter rollout; `quiet`: it is no candidate at all (LoRA off), nothing to explain."""

    why: list[str]
    quiet: bool = False


def candidate(current: Unit | None, recorded: Mapping[str, Any], supported: bool,
              new: AdapterFacts | Refusal | None, version_dir: Path) -> Lists | Refusal:
    """The rollout of a release (its facts `new`, packaged in `version_dir`) into the `current` unit (`recorded`: its
    facts), or why there is none. A unit is a candidate only where its target can change a running unit's adapters
    and it records the facts of the release it serves and the list it serves, one that every replica follows; where
    it is not, or LoRA is off, the refusal is quiet (nothing to explain)."""
    why = []
    if current is None:
        why = ["no live unit"]
    elif not supported:
        why = ["this target cannot change a running unit's adapters"]
    elif new is None:
        why = ["the release's adapter facts were not read"]
    elif isinstance(new, AdapterFacts) and not new.lora:
        why = ["LoRA is off in the new release"]
    elif not isinstance(recorded.get("adapter_facts"), dict):
        why = [f"{current.name} records no adapter facts"]
    elif not isinstance(recorded.get("adapters"), dict):
        why = [f"{current.name} records no adapter list it serves"]
    elif not recorded.get("adapter_list") and current.replicas != 1:  # kubernetes: every pod follows the unit's list
        why = [f"{current.name} runs {current.replicas} replicas (adapter rollouts change one)"]
    if why or current is None:
        return Refusal(why=why, quiet=True)
    if not isinstance(new, AdapterFacts):  # the release's files could not be read: why
        return new or Refusal(why=[], quiet=True)
    try:
        live = AdapterFacts.model_validate(recorded["adapter_facts"])
    except ValueError as exc:
        return Refusal(why=[f"the releases cannot be compared: {exc}"])
    return rollout(current.name, live, recorded, new, version_dir)


def rollout(unit: str, live: AdapterFacts, recorded: Mapping[str, Any], new: AdapterFacts,
            version_dir: Path) -> Lists | Refusal:
    """The lists that roll release `new` (packaged in `version_dir`) into the live `unit` (the facts `live` of the
    release it serves; the facts `recorded` of it: the list it serves, as its driver recorded it when it started the
    unit and the executor after each rollout, and the adapters of an earlier rollout), or why not."""
    if not (live.lora and new.lora):
        return Refusal(why=["LoRA is off in the " + ("live" if not live.lora else "new") + " release"], quiet=True)
    live = live.model_copy(update={"adapters": dict(recorded.get("adapter_ids") or live.adapters)})
    released = max(live.version, int(recorded.get("adapter_release") or 0))
    why = only_adapters_changed(live, new)
    if not why and new.version <= released:
        why.append(f"version {new.version} is not above the live adapters' {released}")
    if why:
        return Refusal(why=why)
    served = dict(recorded.get("adapters") or {})
    folders = {name: str(version_dir / loc.removeprefix("./")) if loc.startswith("./") else loc
               for name, loc in new.listing.items()}
    lists = rollout_lists(served, live.adapters, folders, new.adapters, new.version)
    lists.unit = unit
    return lists


def repository_files(repository: Path, model: str, version: int) -> dict[str, bytes]:
    """A packaged model's config.pbtxt and version files, read under the repository (links not followed)."""
    from tritonpkg import safepath

    out: dict[str, bytes] = {}
    total = 0
    base = repository / model
    for path in [base / "config.pbtxt", *sorted((base / str(version)).rglob("*"))]:
        if path.is_symlink() or not path.is_file() or not safepath.within(path, repository):
            continue
        total += path.stat().st_size
        if total > MAX_FILES_BYTES:
            raise TritonpkgError(f"the model's files are larger than {MAX_FILES_BYTES} bytes", file=base)
        out[path.relative_to(repository).as_posix()] = path.read_bytes()
    return out


def served_list(serving_version: Path) -> dict[str, str]:
    """The unit's served multi_lora.json, its folders made absolute (relative ones are the version's)."""
    path = serving_version / MULTI_LORA
    try:
        listing = version_files.read_adapter_list(serving_version)
    except version_files.NotAnObjectError:
        listing = None
    except (OSError, ValueError) as exc:
        raise TritonpkgError(f"cannot read the served adapter list: {exc}", file=path) from None
    if listing is None or not all(isinstance(v, str) for v in listing.values()):
        raise TritonpkgError("the served adapter list is not a JSON object of name -> folder", file=path)
    return {name: folder if folder.startswith("/") else str((serving_version / folder).resolve())
            for name, folder in listing.items()}
