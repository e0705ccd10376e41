"""Masks for logits that are not CPU float32 (GPU, half precision): the allowed-set is packed into an
int32 bitmask on the CPU (1 bit per token, 4 KB per row at V=128256 instead of 500 KB of floats) and
applied on the logits' device by one kernel.

On CUDA with Triton available that kernel is `_ban_kernel`: it reads only the packed words and stores
-inf where a bit is clear, so the logits are never read. Elsewhere a torch unpack + masked_fill does
the same (several kernels; correct on any device). Host and device bitmask buffers are kept between
steps; the pinned host buffer is rewritten only after the previous step's copy has finished.
No vLLM import here: this module runs wherever torch does."""

from __future__ import annotations

from functools import lru_cache

import torch

try:  # Triton ships with CUDA builds of torch; absent or CPU-only elsewhere
    import triton
    import triton.language as tl
except Exception:  # pragma: no cover - depends on the torch build
    triton = None

if triton is not None:

    @triton.jit
    def _ban_kernel(logits_ptr, mask_ptr, n_cols, logits_stride, mask_stride, BLOCK: tl.constexpr):  # noqa: N803  Triton names constexpr parameters in capitals
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = cols < n_cols
        words = tl.load(mask_ptr + row * mask_stride + (cols >> 5), mask=inside, other=-1)
        banned = ((words >> (cols & 31)) & 1) == 0
        neg = tl.full([BLOCK], float("-inf"), logits_ptr.dtype.element_ty)
        tl.store(logits_ptr + row * logits_stride + cols, neg, mask=inside & banned)


BLOCK = 4096


def triton_available(logits: torch.Tensor) -> bool:
    return triton is not None and logits.is_cuda and logits.stride(-1) == 1


@lru_cache(maxsize=8)
def _unpack_index(vocab_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    cols = torch.arange(vocab_size, device=device, dtype=torch.int64)
    return cols >> 5, (cols & 31).to(torch.int32)


def apply_bitmask(logits: torch.Tensor, packed: torch.Tensor, vocab_size: int, *,
                  use_triton: bool | None = None) -> None:
    """Set ``logits[r, t]`` to -inf where bit ``t`` of row ``r`` is clear, in place; columns past
    ``vocab_size`` (padding) become -inf. ``packed`` may live on the CPU; it is copied over."""
    if packed.device != logits.device:
        packed = packed.to(logits.device, non_blocking=True)
    n_rows = logits.shape[0]
    if use_triton is None:
        use_triton = triton_available(logits)
    if use_triton and n_rows:
        grid = (n_rows, triton.cdiv(vocab_size, BLOCK))
        _ban_kernel[grid](logits, packed, vocab_size, logits.stride(0), packed.stride(0), BLOCK=BLOCK)
    elif n_rows:
        word, shift = _unpack_index(vocab_size, logits.device)
        bits = (packed.index_select(1, word) >> shift) & 1
        logits[:, :vocab_size].masked_fill_(bits == 0, float("-inf"))
    if logits.shape[1] > vocab_size:
        logits[:, vocab_size:] = float("-inf")


class MaskStage:
    """Reused pinned host + device bitmask buffers for one engine (grown on demand)."""

    def __init__(self, words: int) -> None:
        self.words = words
        self.host: torch.Tensor | None = None
        self.dev: dict[torch.device, torch.Tensor] = {}
        self.copied: torch.cuda.Event | None = None  # CUDA event of the last host->device copy

    def host_rows(self, n_rows: int) -> torch.Tensor:
        if self.copied is not None:
            self.copied.synchronize()  # the previous step's copy still reads the pinned buffer
            self.copied = None
        if self.host is None or self.host.shape[0] < n_rows:
            rows = max(n_rows, 2 * (self.host.shape[0] if self.host is not None else 0), 8)
            self.host = torch.empty((rows, self.words), dtype=torch.int32, pin_memory=torch.cuda.is_available())
        return self.host[:n_rows]

    def upload(self, host_rows: torch.Tensor, device: torch.device) -> torch.Tensor:
        n_rows = host_rows.shape[0]
        dev = self.dev.get(device)
        if dev is None or dev.shape[0] < n_rows:
            dev = self.dev[device] = torch.empty((max(n_rows, 8), self.words), dtype=torch.int32, device=device)
        out = dev[:n_rows]
        out.copy_(host_rows, non_blocking=True)
        if device.type == "cuda":
            self.copied = event = torch.cuda.Event()
            event.record()
        return out
