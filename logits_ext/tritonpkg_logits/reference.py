"""Plain-Python model of the engine's semantics, written independently of the C++ code.

It keeps each row's whole token history and recomputes the allowed set from it (and, for
``choice``, from the spelled text rather than a trie), so a bug in the engine's incremental states
shows up as a difference. Slow on purpose; only the tests use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonpkg_logits.spec import SpecError, normalize


class RefEngine:
    def __init__(self, vocab_size: int, eos_ids: Sequence[int], token_bytes: Sequence[bytes] = ()):
        self.vocab_size = vocab_size
        self.eos = set(eos_ids)
        self.token_bytes = list(token_bytes)
        self.rows: dict[int, dict] = {}

    def compile(self, spec: Any) -> dict:
        spec = normalize(spec)
        ids = [t[1] for t in spec.get("transitions", [])] + spec.get("tokens", [])
        ids += [x for g in spec.get("banned", []) for x in g]
        if any(i >= self.vocab_size for i in ids):
            raise SpecError("token out of range")
        if spec["type"] == "choice":
            if not self.token_bytes:
                raise SpecError("choice: no vocabulary")
            texts = [c.encode() for c in spec["choices"]]
            for text in texts:
                for n in range(len(text) + 1):
                    if text[:n] not in texts and not self._continuations(text[:n], texts):
                        raise SpecError("choice: the vocabulary cannot spell every choice")
        if spec["type"] == "allow" and not (set(spec["tokens"]) | (self.eos if spec["eos"] else set())):
            raise SpecError("allow: empty")
        return spec

    def _continuations(self, prefix: bytes, texts: list[bytes]) -> list[int]:
        return [t for t, b in enumerate(self.token_bytes) if b and any(x.startswith(prefix + b) for x in texts)]

    # ---- rows: the same contract as Engine ----
    def set_row(self, row: int, spec: dict, output_ids: list[int] | None = None) -> None:
        self.rows[row] = {"spec": spec, "src": output_ids, "fed": []}

    def clear_row(self, row: int) -> None:
        self.rows.pop(row, None)

    def move_row(self, src: int, dst: int) -> None:
        moved = self.rows.pop(src, None)
        self.rows.pop(dst, None)
        if moved is not None:
            self.rows[dst] = moved

    def swap_rows(self, a: int, b: int) -> None:
        ra, rb = self.rows.pop(a, None), self.rows.pop(b, None)
        if ra is not None:
            self.rows[b] = ra
        if rb is not None:
            self.rows[a] = rb

    def feed(self, row: int, tokens: Sequence[int]) -> None:
        self.rows[row]["fed"] += list(tokens)

    def history(self, row: int) -> list[int]:
        r = self.rows[row]
        if r["src"] is None:
            return r["fed"]
        out = []
        for t in r["src"]:  # real ids up to the first placeholder
            if t < 0:
                break
            out.append(t)
        return out

    def allowed(self, row: int) -> list[int]:
        r = self.rows[row]
        spec, hist = r["spec"], self.history(row)
        kind, every = spec["type"], range(self.vocab_size)
        if kind == "allow":
            return sorted(set(spec["tokens"]) | (self.eos if spec["eos"] else set()))
        if kind == "ban":
            return [t for t in every if t not in spec["tokens"]]
        if kind == "ngram":
            banned = {g[-1] for g in spec["banned"]
                      if len(g) - 1 <= len(hist) and hist[len(hist) - len(g) + 1 :] == g[:-1]}
            run = 0
            while run < len(hist) and hist[-1 - run] == hist[-1]:
                run += 1
            if spec["max_repeat"] and hist and run >= spec["max_repeat"]:
                banned.add(hist[-1])
            return [t for t in every if t not in banned]
        if kind == "token_dfa":
            table = {(f, tok): to for f, tok, to in spec["transitions"]}
            state = spec["start"]
            for t in hist:
                if (state, t) not in table:
                    return sorted(self.eos)
                state = table[(state, t)]
            out = {tok for f, tok, _ in spec["transitions"] if f == state}
            return sorted(out | (self.eos if state in spec["accept"] else set()))
        # choice: spell the history; it must stay a prefix of some choice
        texts = [c.encode() for c in spec["choices"]]
        text = b""
        for t in hist:
            b = self.token_bytes[t] if t < len(self.token_bytes) else b""
            if not b or not any(x.startswith(text + b) for x in texts):
                return sorted(self.eos)
            text += b
        return sorted(set(self._continuations(text, texts)) | (self.eos if text in texts else set()))

    def apply(self, logits, slots: Sequence[int] | None = None) -> None:
        for i in range(logits.shape[0]):
            row = i if not slots else slots[i]
            if row not in self.rows:
                continue
            keep = set(self.allowed(row))
            for t in range(logits.shape[1]):
                if t not in keep:
                    logits[i, t] = float("-inf")
