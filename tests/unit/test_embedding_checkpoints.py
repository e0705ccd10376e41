"""The packed encoder follows what a checkpoint folder says about itself, checked against sentence-transformers
and transformers on the same folders: sentence-transformers' pooling modes, its max_seq_length and
do_lower_case, Dense layers, and the other encoder families (XLM-RoBERTa, MPNet, DistilBERT) as embedding
models and as cross-encoders."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from tests.support.encoders import make_small_encoder
from tests.support.minilm import MINILM
from tritonpkg.embedding.checkpoint import read_checkpoint
from tritonpkg.embedding.encoder import PackedBert
from tritonpkg.embedding.errors import EmbeddingInputError
from tritonpkg.embedding.packing import pack
from tritonpkg.embedding.tokenize import encode_pairs, encode_texts

TEXTS = ["A short one.", "Serving embeddings at the floor needs packing without padding.",
         "Triton and vLLM " * 12, "x"]
LONG = "token budget " * 200  # ~400 tokens: over all-MiniLM-L6-v2's max_seq_length of 256


def ours(folder, texts, static: bool = False) -> np.ndarray:
    checkpoint = read_checkpoint(folder)
    model = PackedBert.from_pretrained(folder)
    ids = encode_texts(checkpoint.tokenizer(), texts, checkpoint.length_limit(None), truncate=True)
    packed = pack(ids, pad_to=sum(map(len, ids)) + 5) if static else pack(ids)
    return (model.encode_static(packed) if static else model.encode(packed)).numpy()


def saved_sentence_transformer(folder, pooling_mode):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    model = SentenceTransformer(modules=[Transformer(str(MINILM), max_seq_length=256),
                                         Pooling(384, pooling_mode=pooling_mode)], device="cpu")
    model.save(str(folder))
    return model


@pytest.mark.parametrize("mode", ["cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken",
                                  ("cls", "mean")])
def test_pooling_follows_the_sentence_transformers_config(tmp_path, mode):
    reference = saved_sentence_transformer(tmp_path / "st", mode)
    assert read_checkpoint(tmp_path / "st").pooling == ((mode,) if isinstance(mode, str) else mode)
    want = reference.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=False)
    for static in (False, True):
        got = ours(tmp_path / "st", TEXTS, static)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)
    mean = ours(MINILM, TEXTS)
    assert np.abs(mean[:, :384] - want[:, :384]).max() > 1e-2  # the mode matters at this tolerance


@pytest.mark.parametrize(("activation", "bias"), [(torch.nn.Tanh(), True), (torch.nn.Identity(), False)])
def test_dense_layers_after_the_pooling_run_as_sentence_transformers_runs_them(tmp_path, activation, bias):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    torch.manual_seed(0)
    reference = SentenceTransformer(modules=[
        Transformer(str(MINILM), max_seq_length=256), Pooling(384, pooling_mode=("cls", "mean")),
        Dense(768, 128, bias=bias, activation_function=activation), Dense(128, 64), Normalize()], device="cpu")
    reference.save(str(tmp_path / "dense"))
    checkpoint = read_checkpoint(tmp_path / "dense")
    assert [(d.in_features, d.out_features) for d in checkpoint.dense] == [(768, 128), (128, 64)]
    assert PackedBert.from_pretrained(tmp_path / "dense").out_dim == 64
    want = reference.encode(TEXTS, normalize_embeddings=False)
    for static in (False, True):
        got = ours(tmp_path / "dense", TEXTS, static)
        got /= np.linalg.norm(got, axis=1, keepdims=True)  # the template's NORMALIZE, here by hand
        np.testing.assert_allclose(got, want, atol=2e-5)


def test_modules_the_encoder_cannot_run_are_refused_by_name(tmp_path):
    folder = tmp_path / "st"
    shutil.copytree(MINILM, folder)
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "2_Dense").mkdir()
    (folder / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 384, "out_features": 8,
                                                                "use_residual": True}))
    torch.save({"linear.weight": torch.zeros(8, 384)}, folder / "2_Dense" / "pytorch_model.bin")
    dense = {"idx": 3, "name": "3", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    (folder / "modules.json").write_text(json.dumps([*modules[:2], dense]))
    with pytest.raises(EmbeddingInputError, match=r"2_Dense/config.json: a residual") as err:
        read_checkpoint(folder)
    assert err.value.field == "use_residual"
    (folder / "modules.json").write_text(json.dumps([*modules, dense]))  # after Normalize
    with pytest.raises(EmbeddingInputError, match=r"module 3 is 'sentence_transformers.models.Dense'") as err:
        read_checkpoint(folder)
    assert err.value.field == "modules[3]"
    lstm = {"idx": 1, "name": "1", "path": "1_LSTM", "type": "sentence_transformers.models.LSTM"}
    (folder / "modules.json").write_text(json.dumps([modules[0], lstm, modules[1]]))
    with pytest.raises(EmbeddingInputError, match=r"module 1 is 'sentence_transformers.models.LSTM' at '1_LSTM'"):
        read_checkpoint(folder)


def test_the_default_length_limit_is_sentence_transformers_max_seq_length():
    from sentence_transformers import SentenceTransformer

    checkpoint = read_checkpoint(MINILM)
    assert (checkpoint.max_length, checkpoint.max_positions) == (256, 512)  # sentence_bert_config.json
    assert checkpoint.length_limit(None) == 256 and checkpoint.length_limit(384) == 384
    assert checkpoint.length_limit(4096) == 512
    want = SentenceTransformer(str(MINILM), device="cpu").encode([LONG], normalize_embeddings=False)
    got = ours(MINILM, [LONG])
    cos = (got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want)
    assert cos > 0.9999, cos
    with pytest.raises(EmbeddingInputError, match=r"more than the model's limit of 256"):
        encode_texts(checkpoint.tokenizer(), [LONG], checkpoint.length_limit(None), truncate=False)


def test_do_lower_case_lowercases_before_a_cased_tokenizer(tmp_path):
    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "cased"
    shutil.copytree(MINILM, folder)
    tok = json.loads((folder / "tokenizer.json").read_text())
    tok["normalizer"]["lowercase"] = False
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    texts = ["Hello WORLD from Triton", "MiXeD CaSe"]
    cased = read_checkpoint(folder).tokenizer()
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": True}))
    lowered = read_checkpoint(folder).tokenizer()
    want = SentenceTransformer(str(folder), device="cpu").tokenize(texts)["input_ids"]
    want = [[int(t) for t in row if t != 0] for row in want]
    assert encode_texts(lowered, texts, 256, True) == want
    assert encode_texts(cased, texts, 256, True) != want


@pytest.mark.parametrize("family", ["xlm-roberta", "mpnet", "distilbert"])
def test_roberta_mpnet_and_distilbert_embeddings_equal_sentence_transformers(tmp_path, family):
    from sentence_transformers import SentenceTransformer

    folder = make_small_encoder(tmp_path / family, family)
    checkpoint = read_checkpoint(folder)
    offset = 0 if family == "distilbert" else 2  # after the padding index
    assert (checkpoint.position_offset, checkpoint.max_positions) == (offset, 512)
    texts = [*TEXTS, LONG[:1200]]  # MPNet's distances past 128 share its last bucket
    want = SentenceTransformer(str(folder), device="cpu").encode(texts, normalize_embeddings=False)
    for static in (False, True):
        np.testing.assert_allclose(ours(folder, texts, static), want, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("family", ["xlm-roberta", "mpnet", "distilbert"])
def test_roberta_mpnet_and_distilbert_cross_encoders_score_as_sentence_transformers(tmp_path, family):
    from sentence_transformers import CrossEncoder

    folder = make_small_encoder(tmp_path / "reranker", family, cross_encoder=True)
    query, docs = "what does the gateway do", [*TEXTS[:3], LONG]
    want = CrossEncoder(str(folder), device="cpu").predict([(query, d) for d in docs])
    checkpoint = read_checkpoint(folder, scoring=True)
    model = PackedBert.from_pretrained(folder)
    assert model.head == "classifier" and model.num_labels == 1
    ids, starts = encode_pairs(checkpoint.tokenizer(), query, docs, checkpoint.length_limit(None), True)
    if family != "distilbert":  # <s> q </s></s> d </s>, one token type
        assert ids[0][:1] == [101] and ids[0].count(102) == 3 and starts == [None] * len(docs)
    logits = model.encode(pack(ids, type_starts=starts))[:, 0]
    np.testing.assert_allclose(torch.sigmoid(logits).numpy(), want, atol=1e-4)
    assert np.ptp(want) > 1e-2
