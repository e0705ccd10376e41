"""What the engine can load from a checkpoint folder, readable without torch: the packager checks a spec's
weights with it, so a wrong folder fails `tritonpkg package` naming the file instead of Triton's model load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from .errors import EmbeddingInputError

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def is_cross_encoder(config: Mapping) -> bool:
    return any(str(a).endswith("ForSequenceClassification") for a in config.get("architectures") or ())


def num_labels(config: Mapping) -> int:
    return int(config.get("num_labels") or len(config.get("id2label") or {}) or 2)  # transformers' default: 2


def check_folder(folder: Path, *, scoring: bool) -> dict:
    """config.json of a BERT checkpoint with its weights and tokenizer.json; for scoring, a cross-encoder
    must give one score per pair. Returns the config; raises EmbeddingInputError naming the file."""
    config_file = folder / "config.json"
    expected = "a BERT checkpoint folder: config.json, model.safetensors or pytorch_model.bin, tokenizer.json"
    if not config_file.is_file():
        raise EmbeddingInputError(f"{config_file} not found", field="weights", expected=expected)
    config = json.loads(config_file.read_text())
    if config.get("model_type") != "bert":
        raise EmbeddingInputError(f"{config_file}: model_type is {config.get('model_type')!r}", field="model_type",
                                  expected="'bert': the packed encoder reads BERT checkpoints")
    for names in (WEIGHT_FILES, ("tokenizer.json",)):
        if not any((folder / n).is_file() for n in names):
            raise EmbeddingInputError(f"{folder} holds no {' or '.join(names)}", field="weights", expected=expected)
    if scoring and is_cross_encoder(config) and num_labels(config) != 1:
        raise EmbeddingInputError(f"{config_file}: the classifier has {num_labels(config)} labels", field="id2label",
                                  expected="1 label: a relevance cross-encoder gives one score per document")
    return config
