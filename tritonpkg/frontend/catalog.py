"""Which models the frontend serves, discovered from Triton once at start-up (and again when a request
names a model it has not seen, at most once a second).

A model's kind and tokenizer come from its `<repo>/<model>/<version>/model.json` (the vLLM engine
arguments the packager wrote) when the frontend knows the repository. Triton's own view cannot tell
them apart: the vLLM backend's auto-complete gives every vLLM model the same inputs and outputs. Without
the repository a vLLM model is probed once: a pooling engine refuses sampling parameters."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tritonpkg import adapter_names, boundedio, version_files
from tritonpkg.frontend.errors import APIError, unknown_model
from tritonpkg.frontend.triton import RETURN_FLAGS, TritonBackend
from tritonpkg.gateway.frontend_bridge import is_template_embedding

Kind = Literal["generate", "embed", "score"]
REFRESH_MIN_INTERVAL_S = 1.0
POOLING_RUNNERS = {"pooling"}
POOLING_CONVERTS = {"embed", "embedding"}
LOCK_NAME = "tritonpkg.lock.json"
MAX_LOCK_BYTES = 16 << 20
GENERATE_INPUTS = {"text_input", "sampling_parameters"}  # the vLLM backend's contract (NVIDIA's mock_llm speaks it)


@dataclass
class ModelEntry:
    name: str
    version: str
    kind: Kind
    backend: str
    created: int
    returns: frozenset[str] = frozenset()  # which return_* inputs the model's config declares
    inputs: frozenset[str] = frozenset()  # every input it declares
    engine_args: dict[str, Any] | None = None
    source: Path | None = None  # the version folder, when the repository is known
    tokenizer: Any = field(default=None, repr=False)
    tokenizer_error: str | None = None
    bos_added: str | None = None  # the BOS text the engine's tokenizer puts before every prompt, if any
    token_bytes: int | None = None  # the most prompt bytes one token can cover (None: no bound is known)
    parser_names: dict[str, str] = field(default_factory=dict)  # the spec's openai tool_call/reasoning parsers
    parsers: Any = field(default=None, repr=False)  # parsing.ModelParsers, loaded when parser_names is set
    parser_error: str | None = None
    vocab_size: int | None = None  # token ids below it are the model's (None: unknown, the backend checks)
    parent: str | None = None  # a LoRA adapter's base: the Triton model that serves it
    lora_name: str | None = None  # the adapter a request to this entry selects (NVIDIA's `lora_name`)

    @property
    def triton_name(self) -> str:
        """The Triton model a request goes to: the base, for an adapter."""
        return self.parent or self.name

    def with_adapter(self, params: dict[str, Any]) -> dict[str, Any]:
        """The request's sampling_parameters, with the adapter's `lora_name` for an adapter's entry."""
        return {**params, "lora_name": self.lora_name} if self.lora_name else params

    @property
    def max_model_len(self) -> int | None:
        value = (self.engine_args or {}).get("max_model_len")
        return int(value) if value else None

    @property
    def max_prompt_bytes(self) -> int | None:
        """No prompt longer than this (in UTF-8 bytes) fits the context, however it tokenizes."""
        if self.max_model_len is None or self.token_bytes is None:
            return None
        return self.max_model_len * self.token_bytes

    def weights_path(self) -> Path | None:
        path = (self.engine_args or {}).get("model")
        if not path:
            return None
        return Path(path) if Path(path).is_absolute() or self.source is None else self.source / path

    def tokenizer_path(self) -> str | None:
        if not self.engine_args:
            # a Python-backend model with the generate contract: the tokenizer files among its own
            if self.backend == "python" and self.source is not None and (self.source / "tokenizer.json").is_file():
                return str(self.source)
            return None
        path = self.engine_args.get("tokenizer") or self.engine_args.get("model")
        if path is None:
            return None
        resolved = Path(path) if Path(path).is_absolute() or self.source is None else self.source / path
        return str(resolved)


def classify(config: dict[str, Any], engine_args: dict[str, Any] | None) -> Kind | None:
    """The frontend route family a Triton model belongs to; None: not served by this frontend."""
    if is_template_embedding(config):
        return "embed"  # the `embedding` template: served through tritonpkg.gateway
    if is_template_scoring(config):
        return "score"  # the `scoring` template: /v1/rerank
    if is_generate_contract(config):
        return "generate"  # a Python-backend model with the vLLM backend's I/O
    if config.get("backend") != "vllm":
        return None
    if engine_args is None:
        return None  # unknown until probed
    if engine_args.get("runner") in POOLING_RUNNERS or engine_args.get("convert") in POOLING_CONVERTS:
        return "embed"
    return "generate"


def is_template_scoring(config: dict[str, Any]) -> bool:
    """A Python-backend model that takes QUERY + DOCUMENTS and gives SCORES."""
    inputs = {i.get("name") for i in config.get("input", [])}
    outputs = {o.get("name") for o in config.get("output", [])}
    return config.get("backend") == "python" and {"QUERY", "DOCUMENTS"} <= inputs and "SCORES" in outputs


def is_generate_contract(config: dict[str, Any]) -> bool:
    """A Python-backend model that takes text_input + sampling_parameters and gives text_output."""
    inputs = {i.get("name") for i in config.get("input", [])}
    outputs = {o.get("name") for o in config.get("output", [])}
    return config.get("backend") == "python" and inputs >= GENERATE_INPUTS and "text_output" in outputs


def read_parser_names(repository: Path | None, name: str, version: str) -> dict[str, str]:
    """The spec's `openai: {tool_call_parser, reasoning_parser}` of one model version, as its lock records
    it ({} when the repository, the lock or the entry is missing or unreadable)."""
    if repository is None:
        return {}
    try:
        lock = json.loads(boundedio.read_file(repository / LOCK_NAME, MAX_LOCK_BYTES))
        names = lock["models"][name]["versions"][version]["serving"].get("openai_parsers") or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return {}
    if not isinstance(names, dict):
        return {}
    return {k: v for k, v in names.items()
            if k in ("tool_call_parser", "reasoning_parser") and isinstance(v, str) and v}


def read_engine_args(version_dir: Path) -> dict[str, Any] | None:
    try:
        return version_files.read_engine_args(version_dir)
    except (OSError, ValueError):
        return None


def read_adapter_names(entry: ModelEntry) -> list[str]:
    """The LoRA adapters a vLLM model serves: its multi_lora.json's names (NVIDIA's list, read by the backend when
    model.json has enable_lora), in order; [] when LoRA is off or the list cannot be read (the backend then
    fails the model's load itself); a name the adapter-name rule refuses is left out (the backend refuses it)."""
    if entry.source is None or not version_files.lora_enabled(entry.engine_args):
        return []
    try:
        names = version_files.read_adapter_list(entry.source)
    except (OSError, ValueError):
        return []
    return [n for n in names if adapter_names.name_problem(n) is None]


class Catalog:
    def __init__(self, backend: TritonBackend, repository: Path | None) -> None:
        self.backend = backend
        self.repository = repository
        self.models: dict[str, ModelEntry] = {}
        self._refreshed = 0.0
        self._lock = asyncio.Lock()

    def names(self) -> list[str]:
        return sorted(self.models)

    async def get(self, name: str, kinds: tuple[Kind, ...] | None = None) -> ModelEntry:
        entry = self.models.get(name)
        if entry is None and time.monotonic() - self._refreshed > REFRESH_MIN_INTERVAL_S:
            await self.refresh()
            entry = self.models.get(name)
        if entry is None:
            raise unknown_model(name, self.names())
        if kinds is not None and entry.kind not in kinds:
            raise APIError(400, f"model '{name}' is a{'n' if entry.kind == 'embed' else ''} {entry.kind} model; "
                           f"this route needs a {' or '.join(kinds)} model", param="model")
        return entry

    async def refresh(self) -> None:
        async with self._lock:
            found: dict[str, ModelEntry] = {}
            for item in await self.backend.models():
                if item.get("state") != "READY":
                    continue
                name, version = item["name"], str(item.get("version", ""))
                known = self.models.get(name)
                if known is not None and known.version == version:
                    found[name] = known
                    continue
                entry = await self._describe(name, version)
                if entry is not None and (name not in found or _newer(version, found[name].version)):
                    found[name] = entry
            for base in [found[n] for n in sorted(found) if found[n].kind == "generate"]:
                for adapter in read_adapter_names(base):
                    if adapter not in found:  # a Triton model of that name wins
                        found[adapter] = dataclasses.replace(base, name=adapter, parent=base.name, lora_name=adapter)
            self.models = found
            self._refreshed = time.monotonic()

    async def _describe(self, name: str, version: str) -> ModelEntry | None:
        config = await self.backend.config(name, version)
        source = self.repository / name / version if self.repository and version else None
        engine_args = read_engine_args(source) if source is not None else None
        kind = classify(config, engine_args)
        if kind is None and config.get("backend") == "vllm":
            kind = await self._probe(name)
        if kind is None:
            return None
        inputs = {i.get("name") for i in config.get("input", [])}
        entry = ModelEntry(name=name, version=version, kind=kind, backend=config.get("backend", ""),
                           created=int(time.time()), returns=frozenset(inputs & set(RETURN_FLAGS)),
                           inputs=frozenset(n for n in inputs if isinstance(n, str)),
                           engine_args=engine_args, source=source,
                           parser_names=read_parser_names(self.repository, name, version) if kind == "generate" else {})
        if kind == "generate":
            await asyncio.to_thread(load_tokenizer, entry)
            if entry.parser_names:
                await asyncio.to_thread(load_parsers, entry)
        entry.vocab_size = vocab_size(entry)
        return entry

    async def _probe(self, name: str) -> Kind:
        """A pooling engine answers sampling parameters with an error; a generating one with one token."""
        inputs = [("text_input", "a"), ("sampling_parameters", json.dumps({"max_tokens": 1})),
                  ("pooling_parameters", "{}")]
        try:
            async for _ in self.backend.infer(name, inputs):
                pass
        except APIError as exc:
            if "embedding model" in exc.message:
                return "embed"
            raise
        return "generate"


def _newer(a: str, b: str) -> bool:
    return (int(a), a) > (int(b), b) if a.isdigit() and b.isdigit() else a > b


def vocab_size(entry: ModelEntry) -> int | None:
    """How many token ids the model takes, as vLLM's renderer bounds a token-id prompt: the larger of the
    model's vocabulary (its config.json) and the tokenizer's; None when neither is known."""
    sizes = []
    weights = entry.weights_path()
    if weights is not None:
        try:
            config = json.loads(boundedio.read_file(weights / "config.json", MAX_LOCK_BYTES))
            value = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                sizes.append(value)
        except (OSError, ValueError, AttributeError, RecursionError):
            pass  # a Hub id or a folder without config.json: the tokenizer's size, or no bound
    tokenizer = entry.tokenizer
    if tokenizer is not None:
        inner: Any = getattr(tokenizer, "tokenizer", None)  # ChatTokenizer: tokenizers.Tokenizer; else transformers'
        sizes.append(inner.get_vocab_size(with_added_tokens=True) if hasattr(inner, "get_vocab_size")
                     else len(tokenizer))
    return max(sizes) if sizes else None


def load_tokenizer(entry: ModelEntry) -> None:
    """Load the model's tokenizer (chat template, prompt token counts); a failure is kept and reported
    by the requests that need it, so the rest of the model keeps serving."""
    path = entry.tokenizer_path()
    if path is None:
        entry.tokenizer_error = (f"the frontend does not know model '{entry.name}'s tokenizer: start it with the "
                                 "model repository (--model-repository)")
        return
    try:
        from tritonpkg.frontend.chat_tokenizer import bytes_per_token, load_chat_tokenizer

        entry.tokenizer = load_chat_tokenizer(path)
        entry.token_bytes = bytes_per_token(entry.tokenizer)
        bos_id = entry.tokenizer.bos_token_id
        if bos_id is not None and entry.tokenizer.encode("a")[:1] == [bos_id]:
            entry.bos_added = entry.tokenizer.bos_token
    except Exception as exc:
        entry.tokenizer_error = f"could not load the tokenizer of model '{entry.name}' from {path}: {exc}"


def load_parsers(entry: ModelEntry) -> None:
    """vLLM's tool-call / reasoning parsers the model's spec names (imports vLLM: only such models pay for
    it); a failure is kept and reported by the chat requests, which need the parsers."""
    path = entry.tokenizer_path()
    if path is None or entry.tokenizer is None:
        entry.parser_error = entry.tokenizer_error or f"model '{entry.name}' has no tokenizer for its parsers"
        return
    try:
        from tritonpkg.frontend.parsing import load_parsers as load

        entry.parsers = load(entry.parser_names, path, entry.name)
    except Exception as exc:
        entry.parser_error = (f"the OpenAI parsers {entry.parser_names} of model '{entry.name}' did not load: "
                              f"{type(exc).__name__}: {exc}")
