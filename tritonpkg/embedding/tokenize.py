"""Texts to token ids with one rule for the gateway and the model: inputs longer than `max_length` are
truncated when truncation is on, else refused with the input's index, its length and the limit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .errors import EmbeddingInputError

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str], max_length: int, truncate: bool,
                 field: str = "input") -> list[list[int]]:
    """`tokenizer` is a `tokenizers.Tokenizer` with truncation and padding disabled."""
    encodings = tokenizer.encode_batch(list(texts))
    ids = [list(e.ids) for e in encodings]
    long = [i for i, seq in enumerate(ids) if len(seq) > max_length]
    if not long:
        return ids
    if not truncate:
        i = long[0]
        raise EmbeddingInputError(
            f"input {i} has {len(ids[i])} tokens, more than the model's limit of {max_length}"
            f"{f' ({len(long)} inputs are too long)' if len(long) > 1 else ''}",
            field=f"{field}[{i}]", expected=f"at most {max_length} tokens, or truncation turned on")
    for i, enc in zip(long, tokenizer_truncating(tokenizer, max_length).encode_batch([texts[i] for i in long]),
                      strict=True):
        ids[i] = list(enc.ids)
    return ids


def encode_pairs(tokenizer: Tokenizer, query: str, documents: Sequence[str], max_length: int, truncate: bool,
                 field: str = "DOCUMENTS") -> tuple[list[list[int]], list[int | None]]:
    """(query, document) pairs as single sequences for a cross-encoder ([CLS] query [SEP] document [SEP] with
    BERT's pair template) -> (ids, where each document's token type 1 begins). A pair over `max_length` is
    truncated longest-first (as transformers' `truncation=True`) or refused with the document's index."""
    pairs = [(query, d) for d in documents]
    encodings = tokenizer.encode_batch(pairs)
    long = [i for i, e in enumerate(encodings) if len(e.ids) > max_length]
    if long and not truncate:
        i = long[0]
        raise EmbeddingInputError(
            f"query + document {i} have {len(encodings[i].ids)} tokens, more than the model's limit of {max_length}"
            f"{f' ({len(long)} documents are too long)' if len(long) > 1 else ''}",
            field=f"{field}[{i}]", expected=f"query + document within {max_length} tokens, or truncation turned on")
    if long:
        for i, enc in zip(long, tokenizer_truncating(tokenizer, max_length).encode_batch([pairs[i] for i in long]),
                          strict=True):
            encodings[i] = enc
    return [list(e.ids) for e in encodings], [next((i for i, t in enumerate(e.type_ids) if t), None)
                                              for e in encodings]


_TRUNCATING: dict[tuple[int, int], Tokenizer] = {}


def tokenizer_truncating(tokenizer: Tokenizer, max_length: int) -> Tokenizer:
    """A copy of `tokenizer` that truncates to `max_length` (special tokens kept), made once."""
    key = (id(tokenizer), max_length)
    if key not in _TRUNCATING:
        copy = type(tokenizer).from_str(tokenizer.to_str())
        copy.enable_truncation(max_length)
        _TRUNCATING[key] = copy
    return _TRUNCATING[key]


def load_tokenizer(path: str) -> Tokenizer:
    """A tokenizers.Tokenizer from tokenizer.json with truncation and padding off (the rules above decide)."""
    from tokenizers import Tokenizer  # only where a tokenizer is loaded: the rules above need none

    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    return tok
