"""A BERT-family encoder (BERT, RoBERTa, XLM-RoBERTa, DistilBERT; MPNet, whose attention adds a learned bias
per relative distance) over packed tokens, built from a checkpoint's state dict (the stable key names of
Hugging Face checkpoints) and its config.json. Two kinds of head: pooling as sentence-transformers
configures it (mean, cls, max, ...; sentence embeddings, bi-encoders, optionally Dense layers after it) and
*ForSequenceClassification's dense + tanh (DistilBERT: ReLU) + projection over the first token
(cross-encoders, which read a (query, document) pair as one sequence; BERT marks the document with token
type 1).

Two attention paths: `encode` (eager, any batch) runs attention per length group, so the only padding
is inside groups of near-equal lengths; `encode_static` takes a batch padded to a fixed token count and
uses a block-diagonal mask, so every shape depends only on (sequence count, padded tokens) and the
whole forward can be captured in a CUDA graph.

`compute_dtype` bfloat16 keeps the matmul weights in bfloat16 and runs the linear layers and attention in
it (AMX / AVX512-BF16 on CPUs, tensor cores on GPUs); the residual stream, LayerNorms and pooling stay
float32, which keeps MiniLM's vectors within cosine 0.9999 of float32's."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F  # noqa: N812  torch's own convention

from .checkpoint import FAMILIES, POOLING_MODES, Checkpoint, Dense, position_offset, read_checkpoint
from .packing import Packed, group_indices

COMPUTE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Per family: the state-dict names of one layer's weights, and of the classification head's (dense, projection).
_BERT_LAYER = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
               "out": "attention.output.dense", "ln1": "attention.output.LayerNorm", "up": "intermediate.dense",
               "down": "output.dense", "ln2": "output.LayerNorm"}
_LAYER_KEYS = {"bert": _BERT_LAYER, "roberta": _BERT_LAYER,
               "mpnet": {**_BERT_LAYER, "q": "attention.attn.q", "k": "attention.attn.k", "v": "attention.attn.v",
                         "out": "attention.attn.o", "ln1": "attention.LayerNorm"},
               "distilbert": {"q": "attention.q_lin", "k": "attention.k_lin", "v": "attention.v_lin",
                              "out": "attention.out_lin", "ln1": "sa_layer_norm", "up": "ffn.lin1", "down": "ffn.lin2",
                              "ln2": "output_layer_norm"}}
_LAYER_PREFIX = {"distilbert": "transformer.layer"}  # else encoder.layer
_CLASSIFIER_KEYS = {"bert": ("pooler.dense", "classifier"), "roberta": ("classifier.dense", "classifier.out_proj"),
                    "mpnet": ("classifier.dense", "classifier.out_proj"),
                    "distilbert": ("pre_classifier", "classifier")}
# DistilBERT's config names the shape its own way
_CONFIG_NAMES = {"hidden_size": "dim", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers",
                 "intermediate_size": "hidden_dim", "hidden_act": "activation"}


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
_DENSE_ACTIVATIONS = {"tanh": torch.tanh, "identity": lambda v: v, "relu": F.relu, "gelu": F.gelu,
                      "sigmoid": torch.sigmoid}


class _Layer(torch.nn.Module):
    """One encoder layer's parameters; PackedBert._layers runs them over packed tokens."""

    qkv_w: torch.nn.Parameter
    qkv_b: torch.nn.Parameter
    out_w: torch.nn.Parameter
    out_b: torch.nn.Parameter
    ln1_w: torch.nn.Parameter
    ln1_b: torch.nn.Parameter
    up_w: torch.nn.Parameter
    up_b: torch.nn.Parameter
    down_w: torch.nn.Parameter
    down_b: torch.nn.Parameter
    ln2_w: torch.nn.Parameter
    ln2_b: torch.nn.Parameter


class PackedBert(torch.nn.Module):
    """`head`: "classifier", or the pooling: a sentence-transformers mode or a tuple of them (concatenated)."""

    def __init__(self, config: Mapping, state: Mapping[str, torch.Tensor], compute_dtype: str = "float32",
                 head: str | tuple[str, ...] = "mean") -> None:
        super().__init__()
        pooling = (head,) if isinstance(head, str) else tuple(head)
        if head != "classifier" and (not pooling or set(pooling) - set(POOLING_MODES)):
            raise ValueError(f"head {head!r} is not supported (expected 'classifier' or pooling modes from "
                             f"{', '.join(POOLING_MODES)})")
        family = FAMILIES.get(config.get("model_type", "bert"))
        if family is None:
            raise ValueError(f"model_type {config.get('model_type')!r} is not supported (expected one of "
                             f"{', '.join(FAMILIES)})")
        config = {**{k: config[v] for k, v in _CONFIG_NAMES.items() if v in config}, **config}
        if compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(f"compute dtype {compute_dtype!r} is not supported "
                             f"(expected one of {', '.join(COMPUTE_DTYPES)})")
        self.compute_dtype = COMPUTE_DTYPES[compute_dtype]
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.head_dim = self.hidden // self.heads
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.position_offset = position_offset(config, family)
        self.max_positions = int(config.get("max_position_embeddings", 512)) - self.position_offset
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
        types = state.get("embeddings.token_type_embeddings.weight")  # MPNet has none
        self.token_type = None if types is None else param(types)
        self.emb_ln = torch.nn.ParameterList([p("embeddings.LayerNorm.weight"), p("embeddings.LayerNorm.bias")])
        # MPNet adds a learned bias per head and bucketed relative distance to every layer's attention scores
        bias = state.get("encoder.relative_attention_bias.weight")
        self.relative_bias = None if bias is None else param(bias)  # [buckets, heads]
        keys = _LAYER_KEYS[family]
        self.layers = torch.nn.ModuleList()
        prefix = _LAYER_PREFIX.get(family, "encoder.layer")
        for i in range(int(config["num_hidden_layers"])):
            at = f"{prefix}.{i}."
            name = lambda role, part, at=at: f"{at}{keys[role]}.{part}"  # noqa: E731
            qkv = lambda part, name=name: torch.cat([state[name(r, part)] for r in "qkv"])  # noqa: E731
            layer = _Layer()
            layer.qkv_w, layer.qkv_b = param(qkv("weight"), self.compute_dtype), param(qkv("bias"), self.compute_dtype)
            layer.out_w, layer.out_b = mm(name("out", "weight")), mm(name("out", "bias"))
            layer.ln1_w, layer.ln1_b = p(name("ln1", "weight")), p(name("ln1", "bias"))
            layer.up_w, layer.up_b = mm(name("up", "weight")), mm(name("up", "bias"))
            layer.down_w, layer.down_b = mm(name("down", "weight")), mm(name("down", "bias"))
            layer.ln2_w, layer.ln2_b = p(name("ln2", "weight")), p(name("ln2", "bias"))
            self.layers.append(layer)
        self.head = "classifier" if head == "classifier" else "pool"
        self.pooling = () if head == "classifier" else pooling
        self.dense = torch.nn.ModuleList()  # add_dense
        self.dense_activations: list[str] = []
        if head == "classifier":
            dense, projection = _CLASSIFIER_KEYS[family]
            missing = [k for k in (f"{dense}.weight", f"{projection}.weight") if k not in state]
            if missing:
                raise ValueError(f"the checkpoint has no {' and no '.join(missing)}: a cross-encoder needs "
                                 "the classification head of a *ForSequenceClassification checkpoint")
            self.pooler_w, self.pooler_b = p(f"{dense}.weight"), p(f"{dense}.bias")
            self.classifier_w, self.classifier_b = p(f"{projection}.weight"), p(f"{projection}.bias")
            self.num_labels = int(self.classifier_w.shape[0])
            self.classifier_act = F.relu if family == "distilbert" else torch.tanh  # between dense and projection

    @classmethod
    def from_pretrained(cls, folder: str | Path | Checkpoint, compute_dtype: str = "float32",
                        head: str | tuple[str, ...] = "auto") -> PackedBert:
        """config.json + model.safetensors (or pytorch_model.bin) of a checkpoint folder. `head="auto"`: the
        classifier when config.json names a *ForSequenceClassification architecture, else "pool"; "pool":
        the folder's sentence-transformers pooling (mean when it has none)."""
        checkpoint = folder if isinstance(folder, Checkpoint) else read_checkpoint(folder)
        folder, config = checkpoint.folder, checkpoint.config
        if head == "auto":
            head = "classifier" if checkpoint.cross_encoder else "pool"
        dense: tuple[Dense, ...] = ()
        if head == "pool":
            head, dense = checkpoint.pooling, checkpoint.dense
        model = cls(config, _load_state(folder), compute_dtype, head)
        for layer in dense:
            model.add_dense(_load_state(layer.folder), layer.activation)
        return model

    def add_dense(self, state: Mapping[str, torch.Tensor], activation: str) -> None:
        """A sentence-transformers Dense layer after the pooling: activation(linear.weight @ v + linear.bias)."""
        weight = state["linear.weight"].detach().float()
        if weight.shape[1] != self.out_dim:
            raise ValueError(f"a Dense layer takes {weight.shape[1]} features but the pooling gives {self.out_dim}")
        bias = state.get("linear.bias")
        self.dense.append(torch.nn.ParameterList([torch.nn.Parameter(t, requires_grad=False) for t in (
            weight, torch.zeros(weight.shape[0]) if bias is None else bias.detach().float())]))
        self.dense_activations.append(activation)

    @property
    def out_dim(self) -> int:
        """The size of the head's output: the vector (after any Dense layers) or the classifier's labels."""
        if self.head == "classifier":
            return self.num_labels
        dense = self._dense_params()
        return dense[-1][0].shape[0] if dense else self.hidden * len(self.pooling)

    def _dense_params(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(weight, bias) of each Dense layer, in order."""
        return [(d[0], d[1]) for d in cast("Iterable[torch.nn.ParameterList]", self.dense)]

    @classmethod
    def random(cls, config: Mapping, seed: int = 0) -> PackedBert:
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
        x = self.word[ids] + self.position[positions + self.position_offset]
        if self.token_type is not None:
            x = x + (self.token_type[0] if token_types is None else self.token_type[token_types])
        return F.layer_norm(x, (self.hidden,), self.emb_ln[0], self.emb_ln[1], self.eps)

    def _layers(self, x: torch.Tensor, attend: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        h, c = self.hidden, self.compute_dtype  # .to(c) and .float() return x itself when c is float32
        for layer in cast("Iterable[_Layer]", self.layers):
            qkv = F.linear(x.to(c), layer.qkv_w, layer.qkv_b)
            a = attend(qkv)
            x = F.layer_norm(x + F.linear(a, layer.out_w, layer.out_b).float(), (h,), layer.ln1_w, layer.ln1_b,
                             self.eps)
            up = self.act(F.linear(x.to(c), layer.up_w, layer.up_b))
            x = F.layer_norm(x + F.linear(up, layer.down_w, layer.down_b).float(), (h,), layer.ln2_w, layer.ln2_b,
                             self.eps)
        return x

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:  # [..., L, H] -> [..., heads, L, d]
        return t.unflatten(-1, (self.heads, self.head_dim)).transpose(-3, -2)

    def _scores_mask(self, positions: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor | None:
        """SDPA's attn_mask over [..., L, L]: `allowed` (bool, broadcastable) alone, or with MPNet the relative
        bias [heads, L, L] of `positions`, with -inf where not allowed."""
        if self.relative_bias is None:
            return allowed
        buckets = _relative_buckets(positions[None, :] - positions[:, None])
        bias = self.relative_bias[buckets].permute(2, 0, 1).to(self.compute_dtype)
        return bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))

    @torch.inference_mode()
    def encode(self, packed: Packed) -> torch.Tensor:
        """The head's [num_sequences, hidden or num_labels] of an unpadded packed batch (eager)."""
        device = self.word.device
        packed = packed.to(device)
        groups = group_indices(packed.lengths, device=device)
        h = self.hidden
        masks = []  # per group, made once for all layers
        for g in groups:
            if g.span is not None:
                width, allowed = g.span[2], None
            else:
                valid = g.gathered()[1]
                width = valid.shape[1]
                allowed = None if bool(valid.all()) else valid[:, None, None, :]
            masks.append(self._scores_mask(torch.arange(width, device=device), allowed))

        def attend(qkv: torch.Tensor) -> torch.Tensor:
            out = torch.empty((qkv.shape[0], h), dtype=qkv.dtype, device=device)
            for g, mask in zip(groups, masks, strict=True):
                if g.span is not None:  # equal lengths side by side: a view, no copies
                    start, count, width = g.span
                    rows = qkv[start:start + count * width].view(count, width, 3 * h)
                    q, k, v = (self._split_heads(t) for t in rows.split(h, dim=-1))
                    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                    out[start:start + count * width] = o.transpose(1, 2).reshape(count * width, h)
                    continue
                gather, valid, tokens = g.gathered()
                rows = qkv[gather]  # [G, L, 3H]
                q, k, v = (self._split_heads(t) for t in rows.split(h, dim=-1))
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                out[tokens] = o.transpose(1, 2).flatten(-2)[valid]
            return out

        x = self._layers(self._embed(packed.input_ids, packed.positions, packed.token_types), attend)
        return self._head(x, packed)

    @torch.inference_mode()
    def encode_static(self, packed: Packed) -> torch.Tensor:
        """`encode` of a batch padded to a fixed token count (padding tokens carry seg == num_sequences),
        with a block-diagonal mask: shapes depend only on (num_sequences, num_tokens), graph-capturable."""
        seg = packed.seg
        scores = self._scores_mask(packed.positions, (seg[:, None] == seg[None, :])[None])
        mask = None if scores is None else scores[None]

        def attend(qkv: torch.Tensor) -> torch.Tensor:
            q, k, v = (self._split_heads(t[None]) for t in qkv.split(self.hidden, dim=-1))
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return o.transpose(1, 2).flatten(-2)[0]

        x = self._layers(self._embed(packed.input_ids, packed.positions, packed.token_types), attend)
        return self._head(x, packed)

    def _head(self, x: torch.Tensor, packed: Packed) -> torch.Tensor:
        if self.head == "pool":
            v = torch.cat([_pool(mode, x, packed) for mode in self.pooling], dim=-1)
            for (weight, bias), activation in zip(self._dense_params(), self.dense_activations, strict=True):
                v = _DENSE_ACTIVATIONS[activation](F.linear(v, weight, bias))
            return v
        pooled = self.classifier_act(F.linear(_pool("cls", x, packed), self.pooler_w, self.pooler_b))
        return F.linear(pooled, self.classifier_w, self.classifier_b)


def _relative_buckets(distance: torch.Tensor, buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """MPNet's bucket of each key - query distance: half the buckets per direction, exact below a quarter
    of them, logarithmic up to `max_distance`. transformers always uses 32 buckets, whatever the config says."""
    half = buckets // 2
    n = -distance
    direction = (n < 0).long() * half
    n = n.abs()
    exact = half // 2
    far = exact + (torch.log(n.float().clamp_min(1) / exact) / math.log(max_distance / exact) * (half - exact)).long()
    return direction + torch.where(n < exact, n, far.clamp_max(half - 1))


def _pool(mode: str, x: torch.Tensor, packed: Packed) -> torch.Tensor:
    """One sentence-transformers pooling over packed tokens. Scatters into num_sequences + 1 rows (the last
    takes a padded batch's padding), so the shapes stay those of the batch: graph-capturable."""
    n, seg = packed.num_sequences, packed.seg
    rows = lambda fill=0.0: torch.full((n + 1, x.shape[1]), fill, dtype=x.dtype, device=x.device)  # noqa: E731
    if mode == "max":
        return rows(float("-inf")).scatter_reduce_(0, seg[:, None].expand_as(x), x, "amax")[:n]
    if mode in ("cls", "lasttoken"):  # the first / last token of each sequence, picked by a 0/1 weight
        if mode == "cls":
            pick = packed.positions == 0
        else:
            pick = torch.ones_like(seg, dtype=torch.bool)
            pick[:-1] = seg[1:] != seg[:-1]
        return rows().index_add_(0, seg, x * pick.to(x.dtype)[:, None])[:n]
    weighted = mode == "weightedmean"
    weights = (packed.positions + 1).to(x.dtype) if weighted else torch.ones_like(seg, dtype=x.dtype)
    sums = rows().index_add_(0, seg, x * weights[:, None] if weighted else x)[:n]  # mean: no [T, H] product
    totals = torch.zeros(n + 1, dtype=x.dtype, device=x.device).index_add_(0, seg, weights)[:n, None]
    return sums / (totals.sqrt() if mode == "mean_sqrt_len_tokens" else totals).clamp_min(1e-9)


def _load_state(folder: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, else pytorch_model.bin (read_checkpoint found one of the two)."""
    if (folder / "model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(str(folder / "model.safetensors"))
    return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)


def _strip_prefix(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoints saved from *For* classes carry their base model's prefix ("bert.", ...); *Model ones none."""
    out = {}
    for key, v in state.items():
        k = key
        for prefix in ("bert.", "roberta.", "mpnet.", "distilbert.", "model.", "0.auto_model."):
            if k.startswith(prefix):
                k = k[len(prefix):]
                break
        out[k] = v
    return out


