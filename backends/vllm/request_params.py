"""Pure request-parameter logic of the vLLM backend (no Triton, no vLLM imports: unit-testable).

model.py puts this folder on sys.path and imports it. Everything here works on plain dicts: the
caller passes the installed vLLM's field tables, so the rules follow the pinned vLLM, not a copy.

What it decides:
- which spelling of structured outputs a request used (`structured_outputs`/`guided_decoding`,
  the older `guided_json`/`guided_regex`/`guided_choice`/`guided_grammar`/`guided_whitespace_pattern`,
  or an OpenAI-style `response_format`) and the one `structured_outputs` dict they become;
- per-request logits-processor arguments (`extra_args`, or OpenAI's `vllm_xargs`) -> `extra_args`;
- that every key, nested ones included, is known: an unknown or conflicting key raises ParamError
  naming it, nothing is dropped.
"""

from __future__ import annotations

import json
import math
from typing import Any

ALIASES = {"guided_decoding": "structured_outputs", "vllm_xargs": "extra_args"}
GUIDED = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
    "guided_json_object": "json_object",
}
GUIDED_OPTIONS = {"guided_whitespace_pattern": "whitespace_pattern"}
JSON_SCHEMA_KEYS = {"name", "description", "schema", "strict"}


class ParamError(ValueError):
    """The request's parameters are wrong; the message names the offending key."""


def _maybe_json(key: str, value: Any) -> Any:
    """Triton request parameters are strings, numbers or booleans only: objects and lists may come
    as JSON text."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ParamError(f"sampling parameter {key!r}: not valid JSON ({exc})") from exc
    return value


def normalize_sampling(
    params: dict[str, Any], fields: dict[str, bool], structured_fields: set[str]
) -> dict[str, Any]:
    """Request JSON -> kwargs for SamplingParams.

    `fields`: SamplingParams field -> whether it takes a plain string (such values are never JSON-decoded).
    `structured_fields`: the public fields of StructuredOutputsParams."""
    params = {k: v for k, v in params.items() if v is not None}
    out: dict[str, Any] = {}
    sources: list[str] = []  # request keys that set a structured-output constraint
    structured: dict[str, Any] = {}
    options: dict[str, Any] = {}
    unknown: list[str] = []

    for key, raw in params.items():
        target = ALIASES.get(key, key)
        if target == "structured_outputs":
            value = _maybe_json(key, raw)
            if not isinstance(value, dict):
                raise ParamError(f"sampling parameter {key!r} must be an object, got {type(value).__name__}")
            bad = sorted(k for k in value if k not in structured_fields)
            if bad:
                raise ParamError(
                    f"unknown key(s) {', '.join(map(repr, bad))} in {key!r}; "
                    f"accepted: {', '.join(sorted(structured_fields))}"
                )
            structured.update({k: v for k, v in value.items() if v is not None})
            sources.append(key)
        elif key in GUIDED:
            # a list may come as JSON text; regex/grammar text is never decoded
            structured[GUIDED[key]] = _maybe_json(key, raw) if key == "guided_choice" else raw
            sources.append(key)
        elif key in GUIDED_OPTIONS:
            options[GUIDED_OPTIONS[key]] = raw
        elif key == "response_format":
            constraint = response_format_constraint(_maybe_json(key, raw))
            if constraint:
                structured.update(constraint)
                sources.append(key)
        elif target == "extra_args":
            value = _maybe_json(key, raw)
            if not isinstance(value, dict):
                raise ParamError(f"sampling parameter {key!r} must be an object, got {type(value).__name__}")
            merged = out.setdefault("extra_args", {})
            clash = sorted(set(merged) & set(value))
            if clash:
                raise ParamError(
                    f"extra_args key(s) {', '.join(map(repr, clash))} given twice (extra_args and vllm_xargs)"
                )
            merged.update(value)
        elif target in fields:
            out[target] = raw if fields[target] else _maybe_json(key, raw)
        else:
            unknown.append(key)
    if unknown:
        spellings = sorted([*GUIDED, *GUIDED_OPTIONS, "response_format", *ALIASES])
        raise ParamError(
            f"unknown sampling parameter(s) {', '.join(repr(k) for k in sorted(unknown))}; "
            f"vLLM's SamplingParams accepts: {', '.join(sorted(fields))} "
            f"(and structured-output spellings: {', '.join(spellings)})"
        )
    constraints = [k for k in structured if k in CONSTRAINT_KEYS]
    if len(sources) > 1 or len(constraints) > 1:
        raise ParamError(
            f"only one structured-output constraint per request; got {', '.join(map(repr, sources))} "
            f"setting {', '.join(map(repr, constraints))}"
        )
    if options and not structured:
        given = [k for k in params if k in GUIDED_OPTIONS]
        raise ParamError(f"{', '.join(map(repr, given))} needs a guided_* constraint")
    if structured:
        structured.update(options)
        if "json" in structured and isinstance(structured["json"], str):
            structured["json"] = _maybe_json(sources[0], structured["json"])
        if "json" in structured:
            structured["json"] = strict_json_strings(structured["json"])
        out["structured_outputs"] = structured
    return out


CONSTRAINT_KEYS = {"json", "regex", "choice", "grammar", "json_object", "structural_tag"}
NO_CONTROL = "[^\\x00-\\x1f]"  # a character RFC 8259 lets a JSON string hold unescaped
STRING_BOUNDS = ("minLength", "maxLength")


def strict_json_strings(schema: Any) -> Any:
    """The OpenAI frontend's rule (tritonpkg.frontend.mapping.strict_json_strings, of which this is a copy: this
    folder imports nothing from tritonpkg), for KServe clients too: xgrammar writes a string with
    minLength/maxLength as up to n of `[^"\\\r\n]`, letting U+0000-U+001F through unescaped (strict JSON
    parsers refuse them), so such a string gets the same bounds as a `pattern` that excludes them. Strings with
    their own pattern or format, and everything else, are left as they are; applying it twice changes nothing."""
    if isinstance(schema, list):
        return [strict_json_strings(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict_json_strings(value) for key, value in schema.items()}
    kinds = schema.get("type")
    is_string = kinds == "string" or (isinstance(kinds, list) and kinds == ["string"])
    if (is_string and any(isinstance(schema.get(b), int) for b in STRING_BOUNDS)
            and "pattern" not in schema and "format" not in schema):
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        for bound in STRING_BOUNDS:
            out.pop(bound, None)
        out["pattern"] = f"^{NO_CONTROL}{{{low},{'' if high is None else int(high)}}}$"
    return out


def response_format_constraint(value: Any) -> dict[str, Any]:
    """OpenAI's response_format -> structured_outputs fields ({} for plain text)."""
    if not isinstance(value, dict) or "type" not in value:
        raise ParamError("'response_format' must be an object with a 'type' (text, json_object or json_schema)")
    kind = value["type"]
    extra = sorted(set(value) - {"type", "json_schema"})
    if extra:
        raise ParamError(f"unknown key(s) {', '.join(map(repr, extra))} in 'response_format'")
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise ParamError(
                "'response_format' of type json_schema needs 'json_schema': {'name': ..., 'schema': {...}}"
            )
        bad = sorted(set(spec) - JSON_SCHEMA_KEYS)
        if bad:
            raise ParamError(f"unknown key(s) {', '.join(map(repr, bad))} in 'response_format.json_schema'")
        return {"json": spec["schema"]}
    raise ParamError(f"'response_format' type {kind!r} is not supported; use text, json_object or json_schema")


def logprobs_json(logprobs: list[dict[int, Any]] | None) -> str:
    """vLLM's per-position {token_id: Logprob} -> JSON text (NVIDIA's backend's shape:
    [{"<id>": {"logprob", "rank", "decoded_token"}}]); 'null' when logprobs were not requested."""
    if logprobs is None:
        return "null"
    rows = [
        {
            str(token_id): {
                "logprob": _finite(lp.logprob),
                "rank": lp.rank,
                "decoded_token": lp.decoded_token,
            }
            for token_id, lp in position.items()
        }
        for position in logprobs
    ]
    return json.dumps(rows)


def prompt_logprobs_json(prompt_logprobs: list | None, prompt_token_ids: list[int]) -> str:
    """vLLM's prompt_logprobs (position 0 None: nothing precedes the first token) -> logprobs_json's shape,
    position 0 the first prompt token's id with logprob, rank and decoded_token null, so every position
    names its token; 'null' when prompt_logprobs were not requested."""
    if prompt_logprobs is None:
        return "null"
    rows = json.loads(logprobs_json([p or {} for p in prompt_logprobs]))
    if rows and not rows[0] and prompt_token_ids:
        first = prompt_token_ids[0]
        rows[0] = {str(first): {"logprob": None, "rank": None, "decoded_token": None}}
    return json.dumps(rows)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def candidate_logprob(prompt_logprobs: list, start: int, token_ids: list[int]) -> float:
    """Sum of log P(token_ids[i] | everything before it) for positions start.. of a prompt scored with
    prompt_logprobs. vLLM's prompt_logprobs[i] is a dict keyed by token id that always holds the
    prompt's own token at position i (position 0 is None: nothing precedes it)."""
    total = 0.0
    for i, token in enumerate(token_ids, start):
        entry = prompt_logprobs[i]
        if entry is None or token not in entry:
            raise ParamError(f"no log-probability for candidate token {token} at position {i}")
        lp = entry[token]
        total += float(getattr(lp, "logprob", lp))
    return total
