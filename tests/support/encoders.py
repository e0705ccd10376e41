"""Small encoders made offline by transformers over MiniLM's vocabulary: real checkpoint layouts (BERT
cross-encoders, XLM-RoBERTa, MPNet, DistilBERT) for the embedding and scoring tests. torch and transformers
are imported when a model is made, so collecting a test module that imports these costs nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.support.minilm import MINILM


def make_cross_encoder(folder: Path, seed: int = 0, num_labels: int = 1) -> Path:
    """A small BertForSequenceClassification (one label unless told) with MiniLM's tokenizer, saved by transformers:
    a real cross-encoder checkpoint's layout, made offline. Weights are random but wide (initializer range
    0.3), so that scores differ from pair to pair by far more than the tolerance they are compared at."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    # num_labels is a PretrainedConfig field that BertConfig's typed signature does not list
    config = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,  # type: ignore[call-arg]
                        intermediate_size=128, max_position_embeddings=512, num_labels=num_labels,
                        initializer_range=0.3)
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(MINILM / name, folder / name)
    return folder


def make_small_encoder(folder: Path, family: str = "xlm-roberta", seed: int = 0, cross_encoder: bool = False) -> Path:
    """A small XLM-RoBERTa, MPNet or DistilBERT saved by transformers: the base model, or a one-label
    *ForSequenceClassification, over MiniLM's vocabulary. XLM-RoBERTa and MPNet get a tokenizer.json that
    frames sequences and pairs as theirs do (`<s> a </s></s> b </s>`, all token types 0), and positions that
    start after the padding index (1), as in the real models, so an encoder that numbers them from 0 gives
    different vectors; DistilBERT keeps BERT's framing and has no token types. Random, wide weights (above)."""
    import torch
    import transformers as tf
    from tokenizers import Tokenizer, processors

    torch.manual_seed(seed)
    common: dict[str, Any] = {"vocab_size": 30522, "pad_token_id": 1, "num_labels": 1, "initializer_range": 0.3}
    config: tf.PretrainedConfig
    if family == "distilbert":
        config = tf.DistilBertConfig(dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=512,
                                     **{**common, "pad_token_id": 0})
    else:
        shape: dict[str, Any] = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                     max_position_embeddings=514, bos_token_id=101, eos_token_id=102,
                                     layer_norm_eps=1e-5, **common)
        config = tf.MPNetConfig(**shape) if family == "mpnet" else tf.XLMRobertaConfig(type_vocab_size=1, **shape)
    name = {"xlm-roberta": "XLMRoberta", "mpnet": "MPNet", "distilbert": "DistilBert"}[family]
    model_class = getattr(tf, f"{name}{'ForSequenceClassification' if cross_encoder else 'Model'}")
    model_class(config).eval().save_pretrained(folder)
    tok = Tokenizer.from_file(str(MINILM / "tokenizer.json"))
    if family != "distilbert":
        tok.post_processor = processors.RobertaProcessing(("[SEP]", 102), ("[CLS]", 101))
    tok.no_padding()
    tok.no_truncation()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512, "cls_token": "[CLS]",
        "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]", "bos_token": "[CLS]", "eos_token": "[SEP]",
        **({"model_input_names": ["input_ids", "attention_mask"]} if family == "distilbert" else {})}))
    return folder
