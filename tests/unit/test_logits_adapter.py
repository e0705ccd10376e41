"""The vLLM adapter (V1 update_state/apply and V2 add_request/apply(ctx)) against vLLM's real types."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tritonpkg_logits._core", reason="logits_ext is not built (scripts/setup.sh builds it)")
pytest.importorskip("vllm")
from vllm import SamplingParams  # noqa: E402  after the importorskip guards
from vllm.v1.sample.logits_processor import BatchUpdate  # noqa: E402  after the importorskip guards
from vllm.v1.sample.logits_processor.interface import MoveDirectionality  # noqa: E402  after the importorskip guards
from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor as V2  # noqa: E402, N814  after the importorskip guards; V2 names the runner

from tests.support.paths import EXAMPLES  # noqa: E402  after the importorskip guards
from tritonpkg_logits.vllm_adapter import ConstraintLogitsProcessor  # noqa: E402  after the importorskip guards

V, EOS = 512, 2
TOKENIZER = EXAMPLES / "tiny-llm" / "tokenizer"


def config():
    mc = SimpleNamespace(get_vocab_size=lambda: V, hf_config=SimpleNamespace(eos_token_id=EOS),
                         tokenizer=str(TOKENIZER),
                         trust_remote_code=False, tokenizer_revision=None)
    return SimpleNamespace(model_config=mc)


def params(spec=None):
    return SamplingParams(extra_args=None if spec is None else {"constraint": spec})


def allow(*ids):
    return {"type": "allow", "tokens": list(ids), "eos": False}


DFA = {"type": "token_dfa", "start": 0, "accept": [2], "transitions": [[0, 10, 1], [1, 11, 2], [1, 12, 0]]}


def allowed_rows(proc, n):
    logits = torch.zeros(n, V)
    proc.apply(logits)
    return [sorted(torch.nonzero(torch.isfinite(r)).flatten().tolist()) for r in logits]


@pytest.fixture
def proc():
    return ConstraintLogitsProcessor(config(), torch.device("cpu"), False)


def update(proc, size, removed=(), added=(), moved=()):
    proc.update_state(BatchUpdate(size, list(removed), list(added), list(moved)))


def test_interface_facts(proc):
    assert proc.is_argmax_invariant() is False
    assert issubclass(ConstraintLogitsProcessor, V2)  # the V2 runner's loader accepts the entry point
    ConstraintLogitsProcessor.validate_params(params())
    ConstraintLogitsProcessor.validate_params(params(DFA))
    with pytest.raises(ValueError, match="unknown field"):
        ConstraintLogitsProcessor.validate_params(params({"type": "ban", "tokens": [1], "x": 1}))
    with pytest.raises(ValueError, match="not valid JSON"):
        ConstraintLogitsProcessor.validate_params(params("{"))


def test_removed_added_moved_overwrite_state(proc):
    outs = [[], [], []]
    update(proc, 3, added=[(0, params(allow(5)), [1], outs[0]), (1, params(DFA), [1], outs[1]),
                           (2, params(), [1], outs[2])])
    assert allowed_rows(proc, 3) == [[5], [10], list(range(V))]
    outs[1].append(10)
    assert allowed_rows(proc, 3)[1] == [11, 12]
    # row 0 finished and was never "removed": a new request takes its slot; then the last row moves into
    # hole 1 (compaction) and the unconstrained row 2 disappears from the tail.
    new0 = []
    update(proc, 2, removed=[2], added=[(0, params(allow(7, 8)), [1], new0)],
           moved=[(1, 2, MoveDirectionality.UNIDIRECTIONAL)])
    update(proc, 2, moved=[(2, 1, MoveDirectionality.UNIDIRECTIONAL)])
    assert allowed_rows(proc, 2) == [[7, 8], [11, 12]]  # the DFA kept its state through both moves
    update(proc, 2, moved=[(0, 1, MoveDirectionality.SWAP)])
    assert allowed_rows(proc, 2) == [[11, 12], [7, 8]]
    # an unconstrained request replacing a constrained row leaves no mask behind
    update(proc, 2, added=[(0, params(), [1], [])])
    assert allowed_rows(proc, 2) == [list(range(V)), [7, 8]]


def test_prefill_rows_never_advance_and_placeholders_are_not_fed(proc):
    out = []
    update(proc, 1, added=[(0, params(DFA), [1] * 50, out)])
    for _ in range(3):  # chunked prefill: several steps with no output yet
        assert allowed_rows(proc, 1) == [[10]]
    out.append(-1)  # async scheduling: the real id is not known yet
    assert allowed_rows(proc, 1) == [[10]]
    out[-1] = 10  # patched before apply()
    assert allowed_rows(proc, 1) == [[11, 12]]
    out.append(11)
    assert allowed_rows(proc, 1) == [[EOS]]


def test_preemption_readd_and_shrunk_list_replay(proc):
    out = []
    update(proc, 1, added=[(0, params(DFA), [1], out)])
    allowed_rows(proc, 1)
    out += [10, 12, 10]
    assert allowed_rows(proc, 1) == [[11, 12]]
    update(proc, 0, removed=[0])  # preempted
    update(proc, 1, added=[(0, params(DFA), [1], list(out))])  # re-added with its full output list
    assert allowed_rows(proc, 1) == [[11, 12]]
    out2 = [10, 12, 10, 11]
    update(proc, 1, added=[(0, params(DFA), [1], out2)])
    assert allowed_rows(proc, 1) == [[EOS]]
    del out2[1:]  # discarded tokens: the list shrank in place, with no BatchUpdate
    assert allowed_rows(proc, 1) == [[11, 12]]


def test_worker_side_compile_error_ends_the_request(proc):
    update(proc, 1, added=[(0, params({"type": "ban", "tokens": [V + 5]}), [1], [])])
    assert allowed_rows(proc, 1) == [[EOS]]


def test_bitmask_path_matches_in_place_path(proc):
    update(proc, 2, added=[(0, params(allow(3, 4)), [1], []), (1, params({"type": "ban", "tokens": [9]}), [1], [])])
    logits = torch.randn(2, V)
    a = logits.clone()
    proc.apply(a)
    b = logits.clone().to(torch.float64)  # not CPU float32: takes the packed-bitmask path
    proc.apply(b)
    assert torch.equal(a, b.to(torch.float32))


def test_v2_adapter_tracks_prefill_decode_and_replay():
    prompt = np.zeros(4, dtype=np.int64)
    prefill = np.zeros(4, dtype=np.int64)
    all_ids = torch.zeros(4, 64, dtype=torch.int64)
    rs = SimpleNamespace(prompt_len=SimpleNamespace(np=prompt), prefill_len=SimpleNamespace(np=prefill),
                         all_token_ids=SimpleNamespace(gpu=all_ids))
    proc = ConstraintLogitsProcessor(config(), rs)
    assert proc.v2
    assert proc.add_request(3, params(DFA)) is True
    assert proc.add_request(1, params()) is False
    prompt[3] = prefill[3] = 8

    def step(rows):  # rows: (slot, pos, input_id)
        ctx = SimpleNamespace(expanded_idx_mapping=torch.tensor([r[0] for r in rows]),
                              pos=torch.tensor([r[1] for r in rows]),
                              input_ids=torch.tensor([r[2] for r in rows]))
        logits = torch.zeros(len(rows), V)
        proc.apply(logits, ctx)
        return [sorted(torch.nonzero(torch.isfinite(r)).flatten().tolist()) for r in logits]

    full = list(range(V))
    assert step([(1, 5, 0), (3, 3, 0)]) == [full, full]  # partial prefill of slot 3: left alone
    assert step([(3, 7, 0), (1, 6, 0)]) == [[10], full]  # last prefill chunk samples the first output
    assert step([(3, 8, 10)]) == [[11, 12]]  # decode: the fed input id is output 0
    assert step([(3, 9, 12)]) == [[10]]
    # preempted and refilled with prompt + 4 outputs: two more than consumed, so replay committed ids
    all_ids[3, 8:12] = torch.tensor([10, 12, 10, 11])
    prefill[3] = 12
    assert step([(3, 10, 10)]) == [full]  # refill in progress
    assert step([(3, 11, 11)]) == [[EOS]]


from hypothesis import given, settings  # noqa: E402  after the importorskip guards
from hypothesis import strategies as st  # noqa: E402  after the importorskip guards

from tritonpkg_logits.reference import RefEngine  # noqa: E402  after the importorskip guards

SPECS = [None, allow(5, 6, 7), DFA, {"type": "ngram", "banned": [[10, 11]], "max_repeat": 2},
         {"type": "ban", "tokens": [10, 12]}, {"type": "choice", "choices": [" Paris", "hello"]}]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_batch_updates_match_reference(data):
    """update_state + apply over random removed/added/moved batches equals the reference engine
    driven by the same operations (including constraint-free requests replacing constrained ones)."""
    from transformers import AutoTokenizer

    from tritonpkg_logits.vocab import token_bytes

    proc = ConstraintLogitsProcessor(config(), torch.device("cpu"), False)
    ref = RefEngine(V, [EOS], token_bytes(AutoTokenizer.from_pretrained(str(TOKENIZER)), V))
    size = 0
    for _ in range(data.draw(st.integers(1, 12))):
        removed = data.draw(st.lists(st.integers(0, 5), max_size=2, unique=True))
        added = []
        for idx in data.draw(st.lists(st.integers(0, 5), max_size=3, unique=True)):
            spec = data.draw(st.sampled_from(SPECS))
            out = data.draw(st.lists(st.sampled_from([5, 6, 10, 11, 12, 7]), max_size=4))  # re-adds carry outputs
            added.append((idx, params(spec), [1], out))
        moved = [(a, b, data.draw(st.sampled_from(list(MoveDirectionality))))
                 for a, b in data.draw(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5))
                                                .filter(lambda t: t[0] != t[1]),
                                                max_size=2))]
        size = 6
        update(proc, size, removed, added, moved)
        for i in removed:
            ref.clear_row(i)
        for idx, p, _, out in added:
            spec = p.extra_args["constraint"] if p.extra_args else None
            if spec is None:
                ref.clear_row(idx)
            else:
                ref.set_row(idx, ref.compile(spec), out)
        for a, b, d in moved:
            (ref.swap_rows if d == MoveDirectionality.SWAP else ref.move_row)(a, b)
        # decode: each constrained row takes an allowed token (prefill rows, chosen at random, take none)
        for row in list(ref.rows):
            src = ref.rows[row]["src"]
            if data.draw(st.booleans()):
                src.append(data.draw(st.sampled_from(ref.allowed(row))))
        logits = torch.randn(size, V)
        mine, theirs = logits.clone(), logits.clone()
        proc.apply(mine)
        ref.apply(theirs)
        assert torch.equal(mine, theirs)
