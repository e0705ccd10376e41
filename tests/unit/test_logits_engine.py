"""The C++ constraint engine against the plain-Python reference (tritonpkg_logits.reference).

Hypothesis drives random constraints, token streams (mostly allowed tokens, sometimes violations) and
row operations (add / re-add with longer or shorter lists, remove, move, swap, placeholders, patches,
truncation, empty-list prefill rows) and requires bit-identical logits and identical allowed sets.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tritonpkg_logits._core", reason="logits_ext is not built (scripts/setup.sh builds it)")
from hypothesis import HealthCheck, given, settings  # noqa: E402  after the importorskip guards
from hypothesis import strategies as st  # noqa: E402  after the importorskip guards

from tritonpkg_logits import Engine, SpecError  # noqa: E402  after the importorskip guards
from tritonpkg_logits.engine import apply_bitmask  # noqa: E402  after the importorskip guards
from tritonpkg_logits.reference import RefEngine  # noqa: E402  after the importorskip guards

V, EOS = 24, 23
# Single letters make every choice spellable; longer pieces give several tokenisations; b"" = special.
TOKEN_BYTES = [b"a", b"b", b"c", b" ", b"ab", b"ba", b"abc", b"ca", b" a", b"bb", b"", b"cab", b"aa",
               b"x", b"y", b"b ", b"c ", b"ac", b"bc", b"cc", b"a b", b"", b"abca", b""]

tok = st.integers(0, V - 1)


@st.composite
def specs(draw):
    kind = draw(st.sampled_from(["token_dfa", "choice", "ngram", "allow", "ban"]))
    if kind == "token_dfa":
        n = draw(st.integers(1, 5))
        trans = {}
        for _ in range(draw(st.integers(1, 12))):
            trans[(draw(st.integers(0, n - 1)), draw(tok))] = draw(st.integers(0, n - 1))
        accept = set(draw(st.lists(st.integers(0, n - 1), max_size=n)))
        accept |= {s for s in range(n) if not any(f == s for f, _ in trans)}
        return {"type": kind, "start": draw(st.integers(0, n - 1)), "accept": sorted(accept),
                "transitions": [[f, t, to] for (f, t), to in trans.items()]}
    if kind == "choice":
        return {"type": kind,
                "choices": draw(st.lists(st.text("abc ", min_size=1, max_size=6), min_size=1, max_size=4))}
    if kind == "ngram":
        grams = draw(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=3), max_size=5))
        rep = draw(st.integers(0 if grams else 1, 3))
        return {"type": kind, "banned": grams, "max_repeat": rep}
    tokens = draw(st.lists(tok, min_size=1, max_size=V - 1))
    if kind == "allow":
        return {"type": kind, "tokens": tokens, "eos": draw(st.booleans())}
    return {"type": kind, "tokens": tokens}


def make(num_threads=1):
    return Engine(V, [EOS], TOKEN_BYTES, num_threads=num_threads), RefEngine(V, [EOS], TOKEN_BYTES)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), n_rows=st.integers(1, 6))
def test_engine_matches_reference_over_random_batches(data, n_rows):
    eng, ref = make()
    lists: dict[int, list[int] | None] = {}
    truncated: set[int] = set()  # vLLM never regrows a shrunk list past its old length before apply()
    for _ in range(data.draw(st.integers(1, 40))):
        op = data.draw(st.sampled_from(["add", "add", "remove", "move", "swap", "tokens", "tokens", "tokens",
                                        "placeholder", "patch", "truncate", "apply", "apply"]))
        row = data.draw(st.integers(0, n_rows - 1))
        if op == "add":
            spec = data.draw(specs())
            # a re-add after preemption carries the full output list; replay must reach the same state
            src = data.draw(st.one_of(st.none(), st.lists(tok, max_size=6)))
            eng.set_row(row, eng.compile(spec), src)
            ref.set_row(row, ref.compile(spec), src)
            lists[row] = src
            truncated.discard(row)
        elif op == "remove":
            eng.clear_row(row)
            ref.clear_row(row)
            lists.pop(row, None)
        elif op in ("move", "swap"):
            other = data.draw(st.integers(0, n_rows - 1))
            if op == "move":
                eng.move_row(row, other)
                ref.move_row(row, other)
                moved = lists.pop(row, None)
                lists.pop(other, None)
                if moved is not None or row in ref.rows:
                    lists[other] = moved
                truncated = {other if r == row else r for r in truncated if r != other}
            else:
                eng.swap_rows(row, other)
                ref.swap_rows(row, other)
                a, b = lists.pop(row, "gone"), lists.pop(other, "gone")
                if b != "gone":
                    lists[row] = b
                if a != "gone":
                    lists[other] = a
                truncated = {other if r == row else row if r == other else r for r in truncated}
        elif row in ref.rows:
            src = lists.get(row)
            if op == "tokens" and row not in truncated:
                allowed = ref.allowed(row)
                new = [data.draw(st.one_of(st.sampled_from(allowed), tok)) for _ in range(data.draw(st.integers(1, 3)))]
                if src is None:
                    eng.feed(row, new)
                    ref.feed(row, new)
                elif -1 not in src:
                    src.extend(new)
            elif op == "placeholder" and src is not None and row not in truncated:
                src.append(-1)
            elif op == "patch" and src is not None:
                src[:] = [data.draw(tok) if t < 0 else t for t in src]
            elif op == "truncate" and src:
                del src[data.draw(st.integers(0, len(src) - 1)):]
                truncated.add(row)
        if op == "apply":
            truncated.clear()
            seed = data.draw(st.integers(0, 2**31 - 1))
            logits = torch.randn(n_rows, V, generator=torch.Generator().manual_seed(seed))
            mine, theirs, packed = logits.clone(), logits.clone(), logits.clone()
            eng.apply(mine)
            ref.apply(theirs)
            assert torch.equal(mine, theirs)
            apply_bitmask(packed, eng.bitmask(n_rows), V)
            assert torch.equal(packed, theirs)
            for r in ref.rows:
                if r < n_rows:
                    assert eng.allowed(r) == ref.allowed(r), (r, ref.rows[r]["spec"], ref.history(r))


@settings(max_examples=40, deadline=None)
@given(spec=specs(), stream=st.lists(tok, max_size=12))
def test_incremental_equals_replay(spec, stream):
    """Feeding tokens one by one, or all at once after a restart, leaves the same allowed set."""
    eng, _ = make()
    h = eng.compile(spec)
    eng.set_row(0, h)
    eng.set_row(1, h)
    for t in stream:
        eng.feed(0, [t])
    eng.restart(1, stream)
    assert eng.allowed(0) == eng.allowed(1)
    assert eng.consumed(0) == eng.consumed(1) == len(stream)


def test_parallel_rows_match_reference_at_real_width():
    """Wide batches are split over OpenMP threads (and, past 32 MiB, use streaming stores); every row
    still gets exactly its own mask, through the in-place and the bitmask paths."""
    width, eos, n = 32000, 2, 272
    eng = Engine(width, [eos], num_threads=4)
    ref = RefEngine(width, [eos])
    g = torch.Generator().manual_seed(0)
    specs_ = [{"type": "allow", "tokens": torch.randint(0, width, (50,), generator=g).tolist()},
              {"type": "ban", "tokens": torch.randint(0, width, (300,), generator=g).tolist()},
              {"type": "ngram", "banned": [[5, 6], [7]], "max_repeat": 2}]
    outputs = []
    for row in range(n):
        spec = specs_[row % 3]
        out = [5] if row % 3 == 2 and row % 2 else [9, 9]
        outputs.append(out)
        eng.set_row(row, eng.compile(spec), out)
        ref.set_row(row, ref.compile(spec), out)
    assert eng.num_constraints == 3  # compiled once per distinct spec
    logits = torch.randn(n, width, generator=g)
    mine, packed = logits.clone(), logits.clone()
    eng.apply(mine)
    apply_bitmask(packed, eng.bitmask(n), width)
    for row in range(n):
        keep = torch.zeros(width, dtype=torch.bool)
        keep[ref.allowed(row)] = True
        expect = logits[row].masked_fill(~keep, float("-inf"))
        assert torch.equal(mine[row], expect), row
        assert torch.equal(packed[row], expect), row


def test_engine_masks_on_torchs_openmp_runtime():
    """The parallel rows run on torch's own OpenMP team only if the build has OpenMP and the process
    holds one libgomp under the soname both link (wheels that vendor a renamed copy, libgomp-<hash>.so,
    keep theirs private), not a second runtime with threads of its own."""
    import os

    from tritonpkg_logits import _core

    assert _core.openmp, "logits_ext was built without -fopenmp: rows would be masked on one thread"
    with open("/proc/self/maps") as maps:
        runtimes = {line.split()[-1] for line in maps if os.path.basename(line.split()[-1]).startswith("libgomp.so")}
    assert len(runtimes) == 1, runtimes


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{not json", "not valid JSON"),
        ({"type": "regex"}, "constraint type must be one of"),
        ({"type": "allow", "tokens": [1], "colour": 1}, "unknown field"),
        ({"type": "allow", "tokens": ["a"]}, "must be an integer"),
        ({"type": "token_dfa", "transitions": [[0, 1]]}, "[from_state, token_id, to_state]"),
        ({"type": "token_dfa", "transitions": [[0, 1, 1]]}, "no transitions and are not accepting"),
        ({"type": "token_dfa", "transitions": [[0, 1, 0], [0, 1, 1]], "accept": [1]}, "two different states"),
        ({"type": "ngram"}, "banned n-grams, a max_repeat"),
        ({"type": "choice", "choices": []}, "non-empty list"),
        ({"type": "ban", "tokens": [99]}, "out of range"),
        ({"type": "choice", "choices": ["zzz"]}, "cannot spell"),
    ],
)
def test_malformed_specs_are_rejected_with_clear_errors(spec, message):
    eng, _ = make()
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")) as info:
        eng.compile(spec)
    assert isinstance(info.value, ValueError)


def test_reference_rejects_what_the_engine_rejects():
    _, ref = make()
    with pytest.raises(SpecError):
        ref.compile({"type": "choice", "choices": ["zzz"]})


def test_choice_accepts_any_tokenisation_and_ends_with_eos():
    eng, _ = make()
    eng.set_row(0, eng.compile({"type": "choice", "choices": ["abc", "ab"]}))
    assert set(eng.allowed(0)) == {0, 4, 6}  # "a", "ab", "abc": every token that starts a choice
    eng.feed(0, [4])  # "ab": a complete choice that "abc" extends
    assert set(eng.allowed(0)) == {2, EOS}
    eng.feed(0, [2])
    assert eng.allowed(0) == [EOS]
    eng.feed(0, [1])  # a violation: only EOS remains
    assert eng.allowed(0) == [EOS]
