"""What the engine loads from a checkpoint folder, read without torch: the packager checks a spec's weights
with it, so a wrong folder fails `tritonpkg package` naming the file instead of Triton's model load, and the
model and the gateway take the same length limit and tokenizer rules from it.

A sentence-transformers folder says how its vectors are made beside the transformer's own files: the pooling
(1_Pooling/config.json), the length it truncates at and whether it lowercases (sentence_bert_config.json).
Serving must follow them: mean-pooling a CLS-pooled checkpoint (BGE) or reading 512 tokens where the model
was trained and is queried with 256 (all-MiniLM-L6-v2) gives vectors that silently differ from the model's."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import EmbeddingInputError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# model_type -> encoder family; RoBERTa's positions start after its padding index.
FAMILIES = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta", "mpnet": "mpnet",
            "distilbert": "distilbert"}
# sentence-transformers' pooling modes, in the order its legacy boolean keys concatenate them.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
_LEGACY_POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                   "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                   "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
_EXPECTED = ("a BERT, RoBERTa, XLM-RoBERTa, MPNet or DistilBERT checkpoint folder: config.json, model.safetensors or "
             "pytorch_model.bin, tokenizer.json")


def is_cross_encoder(config: Mapping) -> bool:
    return any(str(a).endswith("ForSequenceClassification") for a in config.get("architectures") or ())


def num_labels(config: Mapping) -> int:
    return int(config.get("num_labels") or len(config.get("id2label") or {}) or 2)  # transformers' default: 2


@dataclass(frozen=True)
class Dense:
    """A sentence-transformers Dense module: activation(linear(v)) on the pooled vector."""

    folder: Path  # its weights (model.safetensors or pytorch_model.bin: linear.weight, linear.bias)
    in_features: int
    out_features: int
    activation: str  # a value of DENSE_ACTIVATIONS


# Dense activations the encoder runs, by the torch class sentence-transformers names in the module's config
DENSE_ACTIVATIONS = {"torch.nn.modules.activation.Tanh": "tanh", "torch.nn.modules.linear.Identity": "identity",
                     "torch.nn.modules.activation.ReLU": "relu", "torch.nn.modules.activation.GELU": "gelu",
                     "torch.nn.modules.activation.Sigmoid": "sigmoid"}


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint folder the packed encoder can serve, and how its inputs and vectors are made."""

    folder: Path
    config: dict
    family: str  # a value of FAMILIES
    pooling: tuple[str, ...]  # sentence-transformers' modes, concatenated in this order
    max_length: int  # the default length limit: sentence-transformers' max_seq_length rule
    lower_case: bool  # sentence_bert_config.json's do_lower_case
    dense: tuple[Dense, ...] = ()  # sentence-transformers Dense layers after the pooling, in order

    @property
    def cross_encoder(self) -> bool:
        return is_cross_encoder(self.config)

    @property
    def position_offset(self) -> int:
        return position_offset(self.config, self.family)

    @property
    def max_positions(self) -> int:
        return _positions(self.config, self.family)

    def length_limit(self, requested: int | None) -> int:
        """The spec's `max_length` when given, else the checkpoint's; never past the position table."""
        return min(int(requested or self.max_length), self.max_positions)

    def tokenizer(self) -> Tokenizer:
        """tokenizer.json as a `tokenizers.Tokenizer` (no truncation, no padding), lowercasing first when
        sentence_bert_config.json asks for it, as sentence-transformers does."""
        from .tokenize import load_tokenizer

        tok = load_tokenizer(str(self.folder / "tokenizer.json"))
        if self.lower_case:  # sentence-transformers prepends Lowercase; a second lowercasing changes nothing
            from tokenizers import normalizers

            tok.normalizer = normalizers.Sequence([normalizers.Lowercase(), *filter(None, [tok.normalizer])])
        return tok


def read_checkpoint(folder: str | Path, *, scoring: bool = False) -> Checkpoint:
    """Check `folder` and describe it; raises EmbeddingInputError naming the file and field at fault. For
    scoring, a cross-encoder must give one score per pair."""
    folder = Path(folder)
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise EmbeddingInputError(f"{config_file} not found", field="weights", expected=_EXPECTED)
    config = _json(config_file)
    family = FAMILIES.get(config.get("model_type"))
    if family is None:
        raise EmbeddingInputError(f"{config_file}: model_type is {config.get('model_type')!r}", field="model_type",
                                  expected=f"one of {', '.join(map(repr, FAMILIES))}: the packed encoder's families")
    for names in (WEIGHT_FILES, ("tokenizer.json",)):
        if not any((folder / n).is_file() for n in names):
            raise EmbeddingInputError(f"{folder} holds no {' or '.join(names)}", field="weights", expected=_EXPECTED)
    if scoring and is_cross_encoder(config) and num_labels(config) != 1:
        raise EmbeddingInputError(f"{config_file}: the classifier has {num_labels(config)} labels", field="id2label",
                                  expected="1 label: a relevance cross-encoder gives one score per document")
    pooling, dense = (("mean",), ()) if is_cross_encoder(config) else _modules(folder)
    st = _json(folder / "sentence_bert_config.json") if (folder / "sentence_bert_config.json").is_file() else {}
    length = st.get("max_seq_length") or _tokenizer_max_length(folder)
    limit = _positions(config, family)
    if limit < 1:
        raise EmbeddingInputError(f"{config_file}: max_position_embeddings leaves {limit} positions",
                                  field="max_position_embeddings", expected="at least 1 usable position")
    return Checkpoint(folder, config, family, pooling, min(int(length or limit), limit),
                      bool(st.get("do_lower_case", False)), dense)


def position_offset(config: Mapping, family: str) -> int:
    """RoBERTa numbers positions from padding_idx + 1, MPNet from 2 (its padding_idx is fixed at 1); BERT from 0."""
    return {"roberta": int(config.get("pad_token_id", 1)) + 1, "mpnet": 2}.get(family, 0)


def _positions(config: Mapping, family: str) -> int:
    return int(config.get("max_position_embeddings", 512)) - position_offset(config, family)


def _modules(folder: Path) -> tuple[tuple[str, ...], tuple[Dense, ...]]:
    """The pooling and Dense layers of a sentence-transformers folder (modules.json); mean pooling for a plain
    transformers folder, as sentence-transformers itself assumes. A module the encoder cannot run is refused."""
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return ("mean",), ()
    pooling: tuple[str, ...] = ("mean",)
    dense: list[Dense] = []
    normalized = False  # a Dense after a Normalize is refused: the engine normalizes last (NORMALIZE)
    expected = "a Transformer at the folder's top, then Pooling, Dense layers and Normalize"
    for i, module in enumerate(_json(modules_file)):
        kind, path = str(module.get("type", "")), str(module.get("path", ""))
        name = kind.rsplit(".", 1)[-1] if kind.startswith("sentence_transformers.") else kind
        # sentence-transformers moved its modules between packages over releases: the class name decides
        if name == "Pooling" and not dense:
            pooling = _pooling_modes(folder / path / "config.json")
        elif name == "Dense" and not normalized:
            dense.append(_dense(folder / path, f"modules[{i}]"))
        elif name == "Normalize":
            normalized = True
        elif not (name == "Transformer" and i == 0 and not path):
            where = f" at {path!r}" if path else ""
            raise EmbeddingInputError(f"{modules_file}: module {i} is {kind!r}{where}", field=f"modules[{i}]",
                                      expected=f"{expected} (other sentence-transformers modules are not run by "
                                               "the packed encoder)")
    return pooling, tuple(dense)


def _dense(folder: Path, field: str) -> Dense:
    config_file = folder / "config.json"
    config = _json(config_file) if config_file.is_file() else None
    if config is None or not any((folder / n).is_file() for n in WEIGHT_FILES):
        raise EmbeddingInputError(f"{folder} holds no config.json or no {' or '.join(WEIGHT_FILES)}", field=field,
                                  expected="a Dense module folder as sentence-transformers saves it")
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation not in DENSE_ACTIVATIONS:
        raise EmbeddingInputError(f"{config_file}: activation_function {activation!r}", field="activation_function",
                                  expected=f"one of {', '.join(DENSE_ACTIVATIONS)}")
    if config.get("use_residual") or config.get("module_input_name", "sentence_embedding") != "sentence_embedding":
        raise EmbeddingInputError(f"{config_file}: a residual or a non-default input", field="use_residual",
                                  expected="a plain Dense layer on the sentence embedding")
    return Dense(folder, int(config["in_features"]), int(config["out_features"]), DENSE_ACTIVATIONS[activation])


def _pooling_modes(path: Path) -> tuple[str, ...]:
    if not path.is_file():
        return ("mean",)
    config = _json(path)
    mode = config.get("pooling_mode")
    if mode is None:
        modes = tuple(m for key, m in _LEGACY_POOLING.items() if config.get(key)) or ("mean",)
    else:
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown or not modes:
        raise EmbeddingInputError(f"{path}: pooling mode {unknown[0] if unknown else mode!r}", field="pooling_mode",
                                  expected=f"one or more of {', '.join(POOLING_MODES)}")
    return modes  # include_prompt: no prompt is added here (a client's prefix is its text), so it changes nothing


def _tokenizer_max_length(folder: Path) -> int | None:
    """tokenizer_config.json's model_max_length, where it is a real limit (transformers writes 1e30 for none)."""
    path = folder / "tokenizer_config.json"
    value = _json(path).get("model_max_length") if path.is_file() else None
    return int(value) if isinstance(value, (int, float)) and 0 < value < 1_000_000 else None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EmbeddingInputError(f"{path} is not readable JSON: {exc}", field=path.name,
                                  expected="the JSON file a transformers / sentence-transformers save writes") from None
