"""Python face of the C++ engine: spec validation, the compile cache, and torch tensor plumbing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tritonpkg_logits import _core
from tritonpkg_logits.spec import canonical_key, normalize

if TYPE_CHECKING:
    from tritonpkg_logits.device import MaskStage


class Engine:
    """Rows of constraint state machines over one vocabulary.

    ``token_bytes[i]`` is the text token ``i`` spells (needed only by ``choice``); ``eos_ids`` are the
    ids that end a request (allowed in accepting states, and the only ids left after a violation).
    Rows are masked on the process's OpenMP team (torch's, whose threads the forward pass just used):
    ``num_threads=0`` follows ``torch.get_num_threads()`` at every call, N > 0 fixes the team size. On a
    GPU worker vLLM sets torch's threads to 1 (spinning OpenMP threads would steal cycles from the step's
    serial code), so there the bitmask of device logits is built on one thread unless N is given.
    """

    def __init__(self, vocab_size: int, eos_ids: Sequence[int], token_bytes: Sequence[bytes] = (),
                 num_threads: int = 0):
        self.vocab_size = vocab_size
        self.eos_ids = sorted(set(eos_ids))
        self.num_threads = num_threads
        self._core = _core.Engine(vocab_size, self.eos_ids, list(token_bytes))
        self._stage: MaskStage | None = None  # device bitmask buffers, made on the first non-CPU-float32 apply

    def compile(self, spec: Any) -> int:
        """Handle of the compiled constraint; compiled once per distinct (canonical) spec."""
        spec = normalize(spec)
        key = canonical_key(spec)
        handle = self._core.lookup(key)
        if handle >= 0:
            return handle
        kind = spec["type"]
        if kind == "token_dfa":
            ends = [t[0] for t in spec["transitions"]] + [t[2] for t in spec["transitions"]]
            n_states = 1 + max([spec["start"], *spec["accept"], *ends])
            return self._core.add_dfa(key, spec["start"], n_states, spec["transitions"], spec["accept"])
        if kind == "choice":
            return self._core.add_choice(key, [c.encode() for c in spec["choices"]])
        if kind == "ngram":
            return self._core.add_ngram(key, spec["banned"], spec["max_repeat"])
        if kind == "allow":
            return self._core.add_tokens(key, spec["tokens"] + (self.eos_ids if spec["eos"] else []), True)
        return self._core.add_tokens(key, spec["tokens"], False)

    @property
    def num_constraints(self) -> int:
        return self._core.num_constraints()

    def set_row(self, row: int, handle: int, output_ids: list[int] | None = None) -> None:
        """(Re)start ``row`` on a constraint; ``output_ids`` is a live list read at every apply()."""
        self._core.set_row(row, handle, output_ids)

    def clear_row(self, row: int) -> None:
        self._core.clear_row(row)

    def move_row(self, src: int, dst: int) -> None:
        self._core.move_row(src, dst)

    def swap_rows(self, a: int, b: int) -> None:
        self._core.swap_rows(a, b)

    def has_row(self, row: int) -> bool:
        return self._core.has_row(row)

    def feed(self, row: int, tokens: Sequence[int]) -> None:
        self._core.feed(row, list(tokens))

    def restart(self, row: int, tokens: Sequence[int]) -> None:
        self._core.restart(row, list(tokens))

    def consumed(self, row: int) -> int:
        return self._core.consumed(row)

    def allowed(self, row: int) -> list[int]:
        return self._core.allowed(row)

    def _threads(self) -> int:
        import torch

        return self.num_threads or torch.get_num_threads()

    def apply(self, logits, slots: Sequence[int] | None = None) -> int:
        """Mask CPU float32 ``logits`` [rows, V] in place; returns rows left on a placeholder."""
        import torch

        if logits.device.type != "cpu" or logits.dtype != torch.float32 or logits.dim() != 2 or logits.stride(1) != 1:
            raise ValueError("Engine.apply needs a 2-D CPU float32 tensor with contiguous rows; use apply_any()")
        return self._core.apply(logits.data_ptr(), logits.shape[0], logits.shape[1], logits.stride(0),
                                list(slots or ()), self._threads())

    def bitmask(self, n_rows: int, slots: Sequence[int] | None = None, out=None):
        """Packed int32 [n_rows, ceil(V/32)] allowed-bitmask built on the CPU (bit set = allowed)."""
        import torch

        words = (self.vocab_size + 31) // 32
        if out is None:
            out = torch.empty((n_rows, words), dtype=torch.int32)
        self._core.fill_bitmask(out.data_ptr(), n_rows, words, list(slots or ()), self._threads())
        return out

    def apply_any(self, logits, slots: Sequence[int] | None = None) -> int:
        """In place for CPU float32; otherwise (GPU, other dtypes) a CPU-built bitmask applied by one
        device kernel (tritonpkg_logits.device). Returns rows left on a placeholder, like apply()."""
        import torch

        if logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.stride(1) == 1:
            return self.apply(logits, slots)
        from tritonpkg_logits.device import MaskStage, apply_bitmask

        if self._stage is None:
            self._stage = MaskStage((self.vocab_size + 31) // 32)
        n_rows = logits.shape[0]
        host = self._stage.host_rows(n_rows)
        stale = self._core.fill_bitmask(host.data_ptr(), n_rows, host.shape[1], list(slots or ()), self._threads())
        packed = self._stage.upload(host, logits.device) if logits.is_cuda else host
        apply_bitmask(logits, packed, self.vocab_size)
        return stale


def apply_bitmask(logits, packed, vocab_size: int) -> None:
    """Set logits whose bit is clear to -inf, in place (see tritonpkg_logits.device)."""
    from tritonpkg_logits.device import apply_bitmask as _apply

    _apply(logits, packed, vocab_size)
