"""Constraint specs: the JSON format of each kind, validated with clear errors and canonicalised.

A spec is a JSON object (or its text) with a ``type``:

- ``{"type": "token_dfa", "start": 0, "accept": [2], "transitions": [[0, 17, 1], [1, 42, 2]]}``
  states are ints from 0; each transition is ``[from_state, token_id, to_state]``; EOS is allowed in
  accepting states. Every state needs a transition or must be accepting.
- ``{"type": "choice", "choices": ["yes", "no"]}``: the output spells exactly one of the strings (any
  tokenisation of it), then EOS.
- ``{"type": "ngram", "banned": [[5, 6], [9]], "max_repeat": 3}``: no generated n-gram from ``banned``
  and no token more than ``max_repeat`` times in a row (0 or absent: no cap). Prompt tokens don't count.
- ``{"type": "allow", "tokens": [1, 2, 3], "eos": true}``: only these ids (plus EOS unless ``eos`` is false).
- ``{"type": "ban", "tokens": [4, 5]}``: never these ids.

Token-range checks need the vocabulary, so they happen when the engine compiles the spec.
"""

from __future__ import annotations

import json
from typing import Any

EXTRA_ARGS_KEY = "constraint"
"""Key of the spec in ``SamplingParams.extra_args`` (``vllm_xargs`` in the OpenAI server)."""

_FIELDS = {
    "token_dfa": ({"type", "start", "accept", "transitions"}, {"type", "transitions"}),
    "choice": ({"type", "choices"}, {"type", "choices"}),
    "ngram": ({"type", "banned", "max_repeat"}, {"type"}),
    "allow": ({"type", "tokens", "eos"}, {"type", "tokens"}),
    "ban": ({"type", "tokens"}, {"type", "tokens"}),
}
MAX_SPEC_CHARS = 1 << 20


class SpecError(ValueError):
    """A malformed constraint spec (a ValueError, so vLLM answers HTTP 400)."""


def _int(value: Any, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise SpecError(f"{where} must be >= {minimum}, got {value}")
    return value


def _int_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, list):
        raise SpecError(f"{where} must be a list of token ids")
    return [_int(v, f"{where}[{i}]") for i, v in enumerate(value)]


def normalize(spec: Any) -> dict:
    """Validate ``spec`` (dict or JSON text) and return its canonical dict; raises SpecError."""
    if isinstance(spec, (str, bytes)):
        if len(spec) > MAX_SPEC_CHARS:
            raise SpecError(f"constraint spec is longer than {MAX_SPEC_CHARS} characters")
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise SpecError(f"constraint spec is not valid JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise SpecError(f"constraint spec must be a JSON object, got {type(spec).__name__}")
    kind = spec.get("type")
    if kind not in _FIELDS:
        raise SpecError(f"constraint type must be one of {sorted(_FIELDS)}, got {kind!r}")
    known, required = _FIELDS[kind]
    if unknown := set(spec) - known:
        raise SpecError(f"{kind}: unknown field(s) {sorted(unknown)}; allowed: {sorted(known)}")
    if missing := required - set(spec):
        raise SpecError(f"{kind}: missing field(s) {sorted(missing)}")

    if kind == "token_dfa":
        trans = spec["transitions"]
        if not isinstance(trans, list) or not trans:
            raise SpecError("token_dfa: transitions must be a non-empty list of [from, token, to]")
        out = []
        for i, t in enumerate(trans):
            if not isinstance(t, list) or len(t) != 3:
                raise SpecError(f"token_dfa: transitions[{i}] must be [from_state, token_id, to_state]")
            out.append([_int(v, f"token_dfa: transitions[{i}][{j}]") for j, v in enumerate(t)])
        start = _int(spec.get("start", 0), "token_dfa: start")
        accept = sorted(set(_int_list(spec.get("accept", []), "token_dfa: accept")))
        n_states = 1 + max([start, *accept, *(t[0] for t in out), *(t[2] for t in out)])
        seen: dict[tuple[int, int], int] = {}
        for f, tok, to in out:
            if seen.setdefault((f, tok), to) != to:
                raise SpecError(f"token_dfa: token {tok} leaves state {f} to two different states")
        dead = set(range(n_states)) - {t[0] for t in out} - set(accept)
        if dead:
            raise SpecError(f"token_dfa: state(s) {sorted(dead)[:10]} have no transitions and are not accepting")
        transitions = sorted(map(list, {tuple(t) for t in out}))
        return {"type": kind, "start": start, "accept": accept, "transitions": transitions}
    if kind == "choice":
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise SpecError("choice: choices must be a non-empty list of strings")
        for i, c in enumerate(choices):
            if not isinstance(c, str) or not c:
                raise SpecError(f"choice: choices[{i}] must be a non-empty string")
        return {"type": kind, "choices": sorted(set(choices))}
    if kind == "ngram":
        banned = spec.get("banned", [])
        if not isinstance(banned, list):
            raise SpecError("ngram: banned must be a list of token-id lists")
        grams = []
        for i, raw in enumerate(banned):
            g = _int_list(raw, f"ngram: banned[{i}]")
            if not g:
                raise SpecError(f"ngram: banned[{i}] must not be empty")
            grams.append(g)
        max_repeat = _int(spec.get("max_repeat", 0), "ngram: max_repeat")
        if not grams and not max_repeat:
            raise SpecError("ngram: give banned n-grams, a max_repeat, or both")
        return {"type": kind, "banned": sorted(map(list, {tuple(g) for g in grams})), "max_repeat": max_repeat}
    tokens = sorted(set(_int_list(spec["tokens"], f"{kind}: tokens")))
    if kind == "allow":
        eos = spec.get("eos", True)
        if not isinstance(eos, bool):
            raise SpecError("allow: eos must be true or false")
        if not tokens and not eos:
            raise SpecError("allow: the allowed set is empty")
        return {"type": kind, "tokens": tokens, "eos": eos}
    if not tokens:
        raise SpecError("ban: tokens must not be empty")
    return {"type": kind, "tokens": tokens}


def canonical_key(spec: dict) -> str:
    """Stable text of a normalised spec: equal constraints share one compiled machine."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def from_extra_args(extra_args: dict | None) -> dict | None:
    """The normalised spec a request carries, or None when it has none."""
    if not extra_args or extra_args.get(EXTRA_ARGS_KEY) is None:
        return None
    return normalize(extra_args[EXTRA_ARGS_KEY])
