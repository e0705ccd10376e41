"""A BERT encoder over packed tokens, built from a checkpoint's state dict (the key names of Hugging Face
BERT checkpoints, which are stable) and its config.json. Two heads: mean pooling (sentence embeddings,
bi-encoders) and BertForSequenceClassification's pooler + classifier over the [CLS] token (cross-encoders,
which read a (query, document) pair as one sequence with token types 0 and 1).

Two attention paths: `encode` (eager, any batch) runs attention per length group, so the only padding
is inside groups of near-equal lengths; `encode_static` takes a batch padded to a fixed token count and
uses a block-diagonal mask, so every shape depends only on (sequence count, padded tokens) and the
whole forward can be captured in a CUDA graph.

`compute_dtype` bfloat16 keeps the matmul weights in bfloat16 and runs the linear layers and attention in
it (AMX / AVX512-BF16 on CPUs, tensor cores on GPUs); the residual stream, LayerNorms and pooling stay
float32, which keeps MiniLM's vectors within cosine 0.9999 of float32's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import torch
import torch.nn.functional as F

from .checkpoint import is_cross_encoder
from .packing import Packed, group_indices

COMPUTE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
HEADS = ("mean", "classifier")


def resolve_compute_dtype(name: str, device: str = "cpu") -> str:
    """`auto` -> bfloat16 where the hardware computes it natively (a GPU with bf16, a CPU with AMX or
    AVX512-BF16: 2.5-3.4x faster than float32 for MiniLM on this machine's AMX), float32 elsewhere,
    where bfloat16 would be emulated and slower."""
    if name != "auto":
        return name
    if device.startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return "float32"
    return "bfloat16" if {"amx_bf16", "avx512_bf16"} & set(flags) else "float32"


_ACTIVATIONS = {"gelu": F.gelu, "gelu_new": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu}


class PackedBert(torch.nn.Module):
    def __init__(self, config: Mapping, state: Mapping[str, torch.Tensor], compute_dtype: str = "float32",
                 head: str = "mean") -> None:
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"head {head!r} is not supported (expected one of {', '.join(HEADS)})")
        if compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(f"compute dtype {compute_dtype!r} is not supported (expected one of {', '.join(COMPUTE_DTYPES)})")
        self.compute_dtype = COMPUTE_DTYPES[compute_dtype]
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.head_dim = self.hidden // self.heads
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_positions = int(config.get("max_position_embeddings", 512))
        act = config.get("hidden_act", "gelu")
        if act not in _ACTIVATIONS:
            raise ValueError(f"hidden_act {act!r} is not supported (expected one of {', '.join(_ACTIVATIONS)})")
        self.act = _ACTIVATIONS[act]
        state = _strip_prefix(state)
        param = lambda t, dtype=torch.float32: torch.nn.Parameter(t.detach().clone().to(dtype),  # noqa: E731
                                                                 requires_grad=False)
        p = lambda k: param(state[k])  # noqa: E731
        mm = lambda k: param(state[k], self.compute_dtype)  # noqa: E731
        self.word = p("embeddings.word_embeddings.weight")
        self.position = p("embeddings.position_embeddings.weight")
        self.token_type = p("embeddings.token_type_embeddings.weight")
        self.emb_ln = torch.nn.ParameterList([p("embeddings.LayerNorm.weight"), p("embeddings.LayerNorm.bias")])
        self.layers = torch.nn.ModuleList()
        for i in range(int(config["num_hidden_layers"])):
            pre = f"encoder.layer.{i}."
            layer = torch.nn.Module()
            att = pre + "attention.self."
            qkv = lambda part: torch.cat([state[f"{att}{n}.{part}"] for n in ("query", "key", "value")])  # noqa: E731
            layer.qkv_w, layer.qkv_b = param(qkv("weight"), self.compute_dtype), param(qkv("bias"), self.compute_dtype)
            layer.out_w, layer.out_b = mm(pre + "attention.output.dense.weight"), mm(pre + "attention.output.dense.bias")
            layer.ln1_w, layer.ln1_b = p(pre + "attention.output.LayerNorm.weight"), p(pre + "attention.output.LayerNorm.bias")
            layer.up_w, layer.up_b = mm(pre + "intermediate.dense.weight"), mm(pre + "intermediate.dense.bias")
            layer.down_w, layer.down_b = mm(pre + "output.dense.weight"), mm(pre + "output.dense.bias")
            layer.ln2_w, layer.ln2_b = p(pre + "output.LayerNorm.weight"), p(pre + "output.LayerNorm.bias")
            self.layers.append(layer)
        self.head = head
        if head == "classifier":
            missing = [k for k in ("pooler.dense.weight", "classifier.weight") if k not in state]
            if missing:
                raise ValueError(f"the checkpoint has no {' and no '.join(missing)}: a cross-encoder needs "
                                 "BertForSequenceClassification's pooler and classifier")
            self.pooler_w, self.pooler_b = p("pooler.dense.weight"), p("pooler.dense.bias")
            self.classifier_w, self.classifier_b = p("classifier.weight"), p("classifier.bias")
            self.num_labels = int(self.classifier_w.shape[0])

    @classmethod
    def from_pretrained(cls, folder: str | Path, compute_dtype: str = "float32", head: str = "mean") -> "PackedBert":
        """config.json + model.safetensors (or pytorch_model.bin) of a BERT checkpoint folder. `head="auto"`:
        the classifier when config.json names a *ForSequenceClassification architecture, else mean pooling."""
        folder = Path(folder)
        config = json.loads((folder / "config.json").read_text())
        if head == "auto":
            head = "classifier" if is_cross_encoder(config) else "mean"
        if (folder / "model.safetensors").is_file():
            from safetensors.torch import load_file

            state = load_file(str(folder / "model.safetensors"))
        elif (folder / "pytorch_model.bin").is_file():
            state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        else:
            raise FileNotFoundError(f"{folder} holds neither model.safetensors nor pytorch_model.bin")
        return cls(config, state, compute_dtype, head)

    @classmethod
    def random(cls, config: Mapping, seed: int = 0) -> "PackedBert":
        """A BERT of `config`'s shape with random weights (benchmarks and tests where weights can't travel)."""
        g = torch.Generator().manual_seed(seed)
        h, inter = int(config["hidden_size"]), int(config["intermediate_size"])
        r = lambda *shape: torch.randn(*shape, generator=g) * 0.02  # noqa: E731
        state = {"embeddings.word_embeddings.weight": r(int(config["vocab_size"]), h),
                 "embeddings.position_embeddings.weight": r(int(config["max_position_embeddings"]), h),
                 "embeddings.token_type_embeddings.weight": r(int(config.get("type_vocab_size", 2)), h),
                 "embeddings.LayerNorm.weight": torch.ones(h), "embeddings.LayerNorm.bias": torch.zeros(h)}
        shapes = {"attention.self.query": (h, h), "attention.self.key": (h, h), "attention.self.value": (h, h),
                  "attention.output.dense": (h, h), "intermediate.dense": (inter, h), "output.dense": (h, inter)}
        for i in range(int(config["num_hidden_layers"])):
            pre = f"encoder.layer.{i}."
            for name, shape in shapes.items():
                state[pre + name + ".weight"], state[pre + name + ".bias"] = r(*shape), r(shape[0])
            for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
                state[pre + ln + ".weight"], state[pre + ln + ".bias"] = torch.ones(h), torch.zeros(h)
        return cls(config, state)

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor, token_types: torch.Tensor | None) -> torch.Tensor:
        types = self.token_type[0] if token_types is None else self.token_type[token_types]
        x = self.word[ids] + self.position[positions] + types
        return F.layer_norm(x, (self.hidden,), self.emb_ln[0], self.emb_ln[1], self.eps)

    def _layers(self, x: torch.Tensor, attend) -> torch.Tensor:
        h, c = self.hidden, self.compute_dtype  # .to(c) and .float() return x itself when c is float32
        for layer in self.layers:
            qkv = F.linear(x.to(c), layer.qkv_w, layer.qkv_b)
            a = attend(qkv)
            x = F.layer_norm(x + F.linear(a, layer.out_w, layer.out_b).float(), (h,), layer.ln1_w, layer.ln1_b, self.eps)
            up = self.act(F.linear(x.to(c), layer.up_w, layer.up_b))
            x = F.layer_norm(x + F.linear(up, layer.down_w, layer.down_b).float(), (h,), layer.ln2_w, layer.ln2_b,
                             self.eps)
        return x

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:  # [..., L, H] -> [..., heads, L, d]
        return t.unflatten(-1, (self.heads, self.head_dim)).transpose(-3, -2)

    @torch.inference_mode()
    def encode(self, packed: Packed) -> torch.Tensor:
        """The head's [num_sequences, hidden or num_labels] of an unpadded packed batch (eager)."""
        device = self.word.device
        packed = packed.to(device)
        groups = group_indices(packed.lengths, device=device)
        h = self.hidden

        def attend(qkv: torch.Tensor) -> torch.Tensor:
            out = torch.empty((qkv.shape[0], h), dtype=qkv.dtype, device=device)
            for g in groups:
                if g.span is not None:  # equal lengths side by side: a view, no copies
                    start, count, width = g.span
                    rows = qkv[start:start + count * width].view(count, width, 3 * h)
                    o = F.scaled_dot_product_attention(*(self._split_heads(t) for t in rows.split(h, dim=-1)))
                    out[start:start + count * width] = o.transpose(1, 2).reshape(count * width, h)
                    continue
                rows = qkv[g.gather]  # [G, L, 3H]
                q, k, v = (self._split_heads(t) for t in rows.split(h, dim=-1))
                mask = None if bool(g.valid.all()) else g.valid[:, None, None, :]
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                out[g.tokens] = o.transpose(1, 2).flatten(-2)[g.valid]
            return out

        x = self._layers(self._embed(packed.input_ids, packed.positions, packed.token_types), attend)
        return self._head(x, packed)

    @torch.inference_mode()
    def encode_static(self, packed: Packed) -> torch.Tensor:
        """`encode` of a batch padded to a fixed token count (padding tokens carry seg == num_sequences),
        with a block-diagonal mask: shapes depend only on (num_sequences, num_tokens), graph-capturable."""
        seg = packed.seg
        mask = (seg[:, None] == seg[None, :])[None, None]

        def attend(qkv: torch.Tensor) -> torch.Tensor:
            q, k, v = (self._split_heads(t[None]) for t in qkv.split(self.hidden, dim=-1))
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return o.transpose(1, 2).flatten(-2)[0]

        x = self._layers(self._embed(packed.input_ids, packed.positions, packed.token_types), attend)
        return self._head(x, packed)

    def _head(self, x: torch.Tensor, packed: Packed) -> torch.Tensor:
        n = packed.num_sequences
        if self.head == "mean":
            return _mean_pool(x, packed.seg, n)
        first = (packed.positions == 0).to(x.dtype)[:, None]  # each sequence's [CLS]; a scatter, no masked select
        cls = torch.zeros((n + 1, x.shape[1]), dtype=x.dtype, device=x.device).index_add_(0, packed.seg, x * first)[:n]
        pooled = torch.tanh(F.linear(cls, self.pooler_w, self.pooler_b))
        return F.linear(pooled, self.classifier_w, self.classifier_b)


def _mean_pool(x: torch.Tensor, seg: torch.Tensor, num_sequences: int) -> torch.Tensor:
    sums = torch.zeros((num_sequences + 1, x.shape[1]), dtype=x.dtype, device=x.device).index_add_(0, seg, x)
    counts = torch.zeros(num_sequences + 1, dtype=x.dtype, device=x.device).index_add_(
        0, seg, torch.ones_like(seg, dtype=x.dtype))
    return sums[:num_sequences] / counts[:num_sequences, None].clamp_min(1.0)


def _strip_prefix(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoints saved from BertFor* carry a "bert." prefix; BertModel ones carry none."""
    out = {}
    for k, v in state.items():
        for prefix in ("bert.", "model.", "0.auto_model."):
            if k.startswith(prefix):
                k = k[len(prefix):]
                break
        out[k] = v
    return out


