"""Token id -> the bytes it spells, for ``choice`` constraints (walked against the strings' bytes)."""

from __future__ import annotations

import re


def _byte_level_decoder() -> dict[str, int]:
    # GPT-2 style byte-level BPE shows each byte as a printable character; invert that table.
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def token_bytes(tokenizer, vocab_size: int | None = None) -> list[bytes]:
    """Bytes of every token id (special tokens spell nothing); handles byte-level BPE and SentencePiece."""
    size = vocab_size or len(tokenizer)
    pieces = tokenizer.convert_ids_to_tokens(list(range(min(size, len(tokenizer)))))
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    table = _byte_level_decoder()
    byte_level = any(p and "Ġ" in p for p in pieces) or all(
        p is None or all(ch in table for ch in p) for p in pieces[:2000])
    out: list[bytes] = []
    for i, piece in enumerate(pieces):
        if piece is None or i in special:
            out.append(b"")
        elif m := _BYTE_FALLBACK.match(piece):
            out.append(bytes([int(m.group(1), 16)]))
        elif byte_level and all(ch in table for ch in piece):
            out.append(bytes(table[ch] for ch in piece))
        else:
            out.append(piece.replace("▁", " ").encode())
    out += [b""] * (size - len(out))
    return out
