"""The differential corpus: real model configurations, mutated field by field.

Each `Case` is one or more model folders (config.pbtxt, version folders, model.py, model.json) that
`run.py` writes twice: into one shared repository that a single real tritonserver serves in explicit
model-control mode (load, record, unload), and into a repository of its own that `validate_repository`
checks in isolation. The server decides what is valid; validate has to predict it.

Why a generator rather than fixture folders: the interesting configs differ from a real one by a
single field, and building them from a base in code keeps each case a one-line edit that is easy to
read and review. Generation is deterministic: same order, same names, same bytes on every run.

The bases ("real configs") are the shapes the toolkit and Triton users actually write:
  as_  a Python-backend add/sub model, 2 FP32 inputs and 2 outputs of dims [4], max_batch_size 0
  ab_  the same with max_batch_size 8 and dynamic_batching
  by_  a BYTES (TYPE_STRING) in / BYTES out Python model
  dc_  a decoupled Python model (model_transaction_policy.decoupled + response sender in model.py)
  sq_  a sequence-batching model (sequence_batching with START/READY control inputs)
  en_  an ensemble of two Python models (add/sub, then a scale model) with step tensor maps
  vl_  the config the toolkit emits for vLLM models (backend "vllm", decoupled, text_input/stream/
       sampling_parameters/exclude_input_in_output -> text_output, KIND_MODEL, <version>/model.json)
  vs_  NVIDIA's vllm_backend sample (backend "vllm" and an instance group only: the backend's
       auto-complete supplies I/O, max_batch_size 0 and the decoupled policy)
  rp_  repository-layout cases (version folders, missing files) on the add/sub model

The vLLM cases do not start vLLM: the server's backend directory gets a stand-in Python-based backend
`vllm/model.py` (VLLM_STANDIN_PY below) that runs the toolkit backend's own auto_complete_config and
its decoupled guard, then only checks that `<version>/model.json` exists and is JSON. Config semantics
(parsing, auto-complete, normalisation, instance groups, decoupled policy, version folders) are still
judged by the real server; what the real vLLM engine would reject at start-up (bad engine
arguments, missing weights) is out of scope here.

`Case.expect` is what Triton 2.51 does with the case ("load"/"refuse"), as observed on the real server
when the case was written. The server stays the ground truth on every run; run.py compares against
`expect` only to notice when the harness (or the server) behaves differently from what was recorded,
e.g. a broken stand-in backend that would silently turn every vLLM case into a refusal. Several
expectations are surprising and worth knowing (duplicate tensor names, instance_group count 0, a
duplicated scalar field and an empty config.pbtxt all load); the descriptions say so.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# --------------------------------------------------------------------------------------------------
# A small config.pbtxt writer. Mutations need to produce configs the protobuf library would refuse to
# build (unknown enum names, duplicated scalars, syntax errors), so configs are plain dicts rendered
# to protobuf text format here, and text-level edits handle the rest.


class Sym(str):
    """An enum value (or any bare token) written without quotes: `kind: KIND_CPU`."""


class Raw(str):
    """Text written verbatim as a field value (for mutations the format itself forbids)."""


def _scalar(value: object) -> str:
    if isinstance(value, (Sym, Raw)):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"cannot render {value!r}")


def _fields(cfg: dict, indent: int) -> list[str]:
    pad = "  " * indent
    lines: list[str] = []
    for key, value in cfg.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key} {{")
            lines += _fields(value, indent + 1)
            lines.append(f"{pad}}}")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines.append(f"{pad}{key} [")
            for i, item in enumerate(value):
                lines.append(f"{pad}  {{")
                lines += _fields(item, indent + 2)
                lines.append(f"{pad}  }}" + ("," if i + 1 < len(value) else ""))
            lines.append(f"{pad}]")
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: [ " + ", ".join(_scalar(v) for v in value) + " ]")
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}")
    return lines


def pbtxt(cfg: dict) -> str:
    """Render a config dict as protobuf text format (fields in dict order)."""
    return "\n".join(_fields(cfg, 0)) + "\n"


# --------------------------------------------------------------------------------------------------
# model.py sources of the bases. They are real, runnable models: the corpus only loads them, but a
# base that could not serve a request would not be a "real config".

ADDSUB_PY = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
'''

SCALE_PY = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Y = 2 * X."""

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", 2 * pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
'''

BYTES_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """TEXT_OUT = upper-cased TEXT (BYTES in, BYTES out)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            out = np.array([t.upper() for t in text.reshape(-1)], dtype=np.object_).reshape(text.shape)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT_OUT", out)]))
        return responses
'''

DECOUPLED_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled: for IN = n, sends n responses OUT = 0..n-1, then the final flag."""

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)[0])
            for i in range(n):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

SEQUENCE_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Running sum per sequence: START resets it, READY marks slots that hold a request."""

    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            cid = request.correlation_id()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            if start.any():
                self.sums[cid] = np.zeros_like(x)
            self.sums[cid] = self.sums.get(cid, np.zeros_like(x)) + x
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", self.sums[cid])]))
        return responses
'''

VLLM_STANDIN_PY = '''\
"""Stand-in for the vLLM backend, used only by tests/differential.

Triton runs this file for every model whose config says backend: "vllm". What the real backend
(REAL_BACKEND) does before its engine starts happens here too: its own auto_complete_config (the very
function, imported from its file) and its refusal of a model that is not decoupled; then it checks
<version>/model.json (exists, parses as JSON) and starts no engine, so the corpus loads vLLM-shaped
configs in seconds while the real server judges the config."""

import importlib.util
import json
import os

import triton_python_backend_utils as pb_utils

REAL_BACKEND = @REAL_BACKEND@
_spec = importlib.util.spec_from_file_location("_tritonpkg_real_vllm_backend", REAL_BACKEND)
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)


class TritonPythonModel:
    auto_complete_config = staticmethod(_real.TritonPythonModel.auto_complete_config)

    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("the vllm backend needs model_transaction_policy { decoupled: true }")
        path = os.path.join(args["model_repository"], args["model_version"], "model.json")
        with open(path, encoding="utf-8") as f:
            json.load(f)

    def execute(self, requests):
        for request in requests:
            request.get_response_sender().send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

MODEL_JSON = '{"model": "/models/tiny-llm", "max_model_len": 256, "enforce_eager": true}\n'


# --------------------------------------------------------------------------------------------------
# Cases

DIR = object()
"""File-map value meaning "an empty directory" (a version folder with nothing in it)."""

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Model:
    """One model folder: relative path -> file text (or DIR for an empty directory)."""

    dirname: str
    files: tuple[tuple[str, object], ...]

    def write(self, repo: Path) -> None:
        root = repo / self.dirname
        root.mkdir(parents=True, exist_ok=True)
        for rel, content in self.files:
            path = root / rel
            if content is DIR:
                path.mkdir(parents=True, exist_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(str(content), encoding="utf-8")


@dataclass(frozen=True)
class Case:
    """One corpus entry. `load` is the model the server is asked to load (an ensemble loads its steps)."""

    name: str
    base: str
    description: str
    expect: str
    models: tuple[Model, ...]
    load: str

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(m.dirname for m in self.models)

    def write(self, repo: Path) -> None:
        for model in self.models:
            model.write(repo)


@dataclass
class Draft:
    """A model folder while a case is being built: edit `config` (a dict), `files`, or `text_edit`."""

    dirname: str
    config: dict | None
    files: dict[str, object] = field(default_factory=dict)
    text_edit: Callable[[str], str] | None = None

    def render(self) -> Model:
        files = dict(self.files)
        if self.config is not None:
            text = pbtxt(self.config)
            files["config.pbtxt"] = self.text_edit(text) if self.text_edit else text
        ordered = sorted(files.items(), key=lambda kv: (kv[0] != "config.pbtxt", kv[0]))
        return Model(self.dirname, tuple(ordered))


def tensor(name: str, dtype: str, dims: list, **extra) -> dict:
    """A tensor entry of input/output."""
    return {"name": name, "data_type": Sym(dtype), "dims": list(dims), **extra}


# ---- bases: each returns {role: Draft}; role "main" is the model that is loaded -------------------

def base_addsub(n: str) -> dict[str, Draft]:
    cfg = {
        "name": n,
        "backend": "python",
        "max_batch_size": 0,
        "input": [tensor("INPUT0", "TYPE_FP32", [4]), tensor("INPUT1", "TYPE_FP32", [4])],
        "output": [tensor("OUTPUT0", "TYPE_FP32", [4]), tensor("OUTPUT1", "TYPE_FP32", [4])],
        "instance_group": [{"count": 1, "kind": Sym("KIND_CPU")}],
    }
    return {"main": Draft(n, cfg, {"1/model.py": ADDSUB_PY})}


def base_batched(n: str) -> dict[str, Draft]:
    drafts = base_addsub(n)
    cfg = drafts["main"].config
    cfg["max_batch_size"] = 8
    cfg["dynamic_batching"] = {"max_queue_delay_microseconds": 100}
    return drafts


def base_bytes(n: str) -> dict[str, Draft]:
    cfg = {
        "name": n,
        "backend": "python",
        "max_batch_size": 0,
        "input": [tensor("TEXT", "TYPE_STRING", [-1])],
        "output": [tensor("TEXT_OUT", "TYPE_STRING", [-1])],
        "instance_group": [{"count": 1, "kind": Sym("KIND_CPU")}],
    }
    return {"main": Draft(n, cfg, {"1/model.py": BYTES_PY})}


def base_decoupled(n: str) -> dict[str, Draft]:
    cfg = {
        "name": n,
        "backend": "python",
        "max_batch_size": 0,
        "model_transaction_policy": {"decoupled": True},
        "input": [tensor("IN", "TYPE_INT32", [1])],
        "output": [tensor("OUT", "TYPE_INT32", [1])],
        "instance_group": [{"count": 1, "kind": Sym("KIND_CPU")}],
    }
    return {"main": Draft(n, cfg, {"1/model.py": DECOUPLED_PY})}


def _control(name: str, kind: str, **values) -> dict:
    return {"name": name, "control": [{"kind": Sym(kind), **values}]}


def base_sequence(n: str) -> dict[str, Draft]:
    cfg = {
        "name": n,
        "backend": "python",
        "max_batch_size": 8,
        "sequence_batching": {
            "max_sequence_idle_microseconds": 5000000,
            "control_input": [
                _control("START", "CONTROL_SEQUENCE_START", int32_false_true=[0, 1]),
                _control("READY", "CONTROL_SEQUENCE_READY", int32_false_true=[0, 1]),
            ],
        },
        "input": [tensor("INPUT", "TYPE_FP32", [1])],
        "output": [tensor("OUTPUT", "TYPE_FP32", [1])],
        "instance_group": [{"count": 1, "kind": Sym("KIND_CPU")}],
    }
    return {"main": Draft(n, cfg, {"1/model.py": SEQUENCE_PY})}


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> dict:
    return {
        "model_name": model,
        "model_version": version,
        "input_map": [{"key": k, "value": v} for k, v in inputs.items()],
        "output_map": [{"key": k, "value": v} for k, v in outputs.items()],
    }


def base_ensemble(n: str) -> dict[str, Draft]:
    """ensemble(INPUT0, INPUT1) -> pre (add/sub) -> sum -> post (scale) -> SUM_SCALED; pre's diff -> DIFF."""
    pre, post = f"{n}__pre", f"{n}__post"
    pre_d = base_addsub(pre)["main"]
    post_cfg = {
        "name": post,
        "backend": "python",
        "max_batch_size": 0,
        "input": [tensor("X", "TYPE_FP32", [4])],
        "output": [tensor("Y", "TYPE_FP32", [4])],
        "instance_group": [{"count": 1, "kind": Sym("KIND_CPU")}],
    }
    ens_cfg = {
        "name": n,
        "platform": "ensemble",
        "max_batch_size": 0,
        "input": [tensor("INPUT0", "TYPE_FP32", [4]), tensor("INPUT1", "TYPE_FP32", [4])],
        "output": [tensor("SUM_SCALED", "TYPE_FP32", [4]), tensor("DIFF", "TYPE_FP32", [4])],
        "ensemble_scheduling": {"step": [
            _step(pre, {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "sum", "OUTPUT1": "DIFF"}),
            _step(post, {"X": "sum"}, {"Y": "SUM_SCALED"}),
        ]},
    }
    return {
        "main": Draft(n, ens_cfg, {"1": DIR}),
        "pre": pre_d,
        "post": Draft(post, post_cfg, {"1/model.py": SCALE_PY}),
    }


VLLM_INPUTS = [
    tensor("text_input", "TYPE_STRING", [1]),
    tensor("stream", "TYPE_BOOL", [1], optional=True),
    tensor("sampling_parameters", "TYPE_STRING", [1], optional=True),
    tensor("exclude_input_in_output", "TYPE_BOOL", [1], optional=True),
]


def base_vllm(n: str) -> dict[str, Draft]:
    """The shape tritonpkg.repository emits for `kind: vllm` specs."""
    cfg = {
        "name": n,
        "backend": "vllm",
        "input": copy.deepcopy(VLLM_INPUTS),
        "output": [tensor("text_output", "TYPE_STRING", [-1])],
        "instance_group": [{"count": 1, "kind": Sym("KIND_MODEL")}],
        "model_transaction_policy": {"decoupled": True},
    }
    return {"main": Draft(n, cfg, {"1/model.json": MODEL_JSON})}


SAMPLE_MODEL_JSON = '{"model": "facebook/opt-125m", "gpu_memory_utilization": 0.1, "enforce_eager": true}\n'


def base_vllm_sample(n: str) -> dict[str, Draft]:
    """The shape of NVIDIA's vllm_backend sample (samples/model_repository/vllm_model): a backend and an
    instance group; the backend's auto-complete supplies I/O, max_batch_size and the decoupled policy."""
    cfg = {"backend": "vllm", "instance_group": [{"count": 1, "kind": Sym("KIND_MODEL")}]}
    return {"main": Draft(n, cfg, {"1/model.json": SAMPLE_MODEL_JSON})}


BASES: dict[str, Callable[[str], dict[str, Draft]]] = {
    "as": base_addsub,
    "ab": base_batched,
    "by": base_bytes,
    "dc": base_decoupled,
    "sq": base_sequence,
    "en": base_ensemble,
    "vl": base_vllm,
    "vs": base_vllm_sample,
    "rp": base_addsub,
}

# ---- edit helpers (each returns a function of the "main" Draft) ----------------------------------

Edit = Callable[[Draft], None]


def chain(*edits: Edit) -> Edit:
    def run(d: Draft) -> None:
        for e in edits:
            e(d)
    return run


def setf(key: str, value: object) -> Edit:
    return lambda d: d.config.__setitem__(key, value)


def delf(key: str) -> Edit:
    return lambda d: d.config.pop(key)


def tset(io: str, index: int, key: str, value: object) -> Edit:
    return lambda d: d.config[io][index].__setitem__(key, value)


def tdel(io: str, index: int, key: str) -> Edit:
    return lambda d: d.config[io][index].pop(key)


def text(fn: Callable[[str], str]) -> Edit:
    def run(d: Draft) -> None:
        d.text_edit = fn
    return run


def sub(old: str, new: str, count: int = 1) -> Edit:
    """A text-level edit; fails loudly when the base text no longer contains `old`."""
    def fn(t: str) -> str:
        assert old in t, f"corpus edit: {old!r} not found in config"
        return t.replace(old, new, count)
    return text(fn)


def nofile(path: str) -> Edit:
    return lambda d: d.files.pop(path)


def addfile(path: str, content: object) -> Edit:
    return lambda d: d.files.__setitem__(path, content)


def rename_config(path: str) -> Edit:
    def run(d: Draft) -> None:
        d.files[path] = pbtxt(d.config)
        d.config = None
    return run


def noconfig() -> Edit:
    def run(d: Draft) -> None:
        d.config = None
    return run


def ig(**group) -> Edit:
    """Replace instance_group with one group."""
    return setf("instance_group", [group])


def seq_edit(fn: Callable[[dict], None]) -> Edit:
    return lambda d: fn(d.config["sequence_batching"])


# ---- the corpus ----------------------------------------------------------------------------------

ALL_DTYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
              "FP16", "FP64", "BF16", "STRING")


class _Builder:
    def __init__(self) -> None:
        self.cases: list[Case] = []

    def add(self, base: str, suffix: str, description: str, expect: str,
            edit: Edit | None = None, ens: Callable[[dict[str, Draft]], None] | None = None) -> None:
        name = f"{base}_{suffix}"
        assert NAME_RE.match(name), name
        assert expect in ("load", "refuse"), expect
        drafts = BASES[base](name)
        if edit is not None:
            edit(drafts["main"])
        if ens is not None:
            ens(drafts)
        models = tuple(d.render() for d in drafts.values())
        self.cases.append(Case(name, base, description, expect, models, drafts["main"].dirname))


def _addsub_cases(b: _Builder) -> None:
    a = b.add
    a("as", "base", "base add/sub Python model, dims [4], max_batch_size 0", "load")
    # data_type, every valid type on INPUT0 (the Python backend does not check types at load)
    for t in ALL_DTYPES:
        a("as", f"in0_type_{t.lower()}", f"INPUT0 data_type TYPE_{t}", "load",
          tset("input", 0, "data_type", Sym(f"TYPE_{t}")))
    a("as", "out0_type_string", "OUTPUT0 data_type TYPE_STRING", "load",
      tset("output", 0, "data_type", Sym("TYPE_STRING")))
    a("as", "in0_type_invalid", "INPUT0 data_type TYPE_INVALID", "refuse",
      tset("input", 0, "data_type", Sym("TYPE_INVALID")))
    a("as", "out0_type_invalid", "OUTPUT0 data_type TYPE_INVALID", "refuse",
      tset("output", 0, "data_type", Sym("TYPE_INVALID")))
    a("as", "in0_type_missing", "INPUT0 without data_type (defaults to TYPE_INVALID)", "refuse",
      tdel("input", 0, "data_type"))
    a("as", "in0_type_unknown", "INPUT0 data_type TYPE_FLOAT32 (no such enum value: parse error)", "refuse",
      tset("input", 0, "data_type", Sym("TYPE_FLOAT32")))
    a("as", "in0_type_lowercase", "INPUT0 data_type type_fp32 (enum names are case-sensitive)", "refuse",
      tset("input", 0, "data_type", Sym("type_fp32")))
    a("as", "in0_type_numeric", "INPUT0 data_type 11 (the enum number of TYPE_FP32)", "load",
      tset("input", 0, "data_type", Raw("11")))
    a("as", "in0_type_quoted", 'INPUT0 data_type "TYPE_FP32" (a string where an enum is expected)', "refuse",
      tset("input", 0, "data_type", "TYPE_FP32"))
    a("as", "in0_type_bare_fp32", "INPUT0 data_type FP32 (missing the TYPE_ prefix)", "refuse",
      tset("input", 0, "data_type", Sym("FP32")))
    # dims
    a("as", "in0_dims_missing", "INPUT0 without dims", "refuse", tdel("input", 0, "dims"))
    a("as", "out0_dims_missing", "OUTPUT0 without dims", "refuse", tdel("output", 0, "dims"))
    a("as", "in0_dims_zero", "INPUT0 dims [0]", "refuse", tset("input", 0, "dims", [0]))
    a("as", "in0_dims_minus2", "INPUT0 dims [-2]", "refuse", tset("input", 0, "dims", [-2]))
    a("as", "in0_dims_var", "INPUT0 dims [-1] (variable)", "load", tset("input", 0, "dims", [-1]))
    a("as", "out0_dims_var", "OUTPUT0 dims [-1] (variable)", "load", tset("output", 0, "dims", [-1]))
    a("as", "in0_dims_inner_zero", "INPUT0 dims [4, 0]", "refuse", tset("input", 0, "dims", [4, 0]))
    a("as", "in0_dims_large", "INPUT0 dims [1000000000]", "load", tset("input", 0, "dims", [1000000000]))
    a("as", "in0_dims_overflow", "INPUT0 dims [9223372036854775808] (does not fit int64: parse error)", "refuse",
      tset("input", 0, "dims", [9223372036854775808]))
    a("as", "in0_dims_float", "INPUT0 dims [4.0] (a float where int64 is expected)", "refuse",
      tset("input", 0, "dims", [Raw("4.0")]))
    a("as", "out0_dims_zero", "OUTPUT0 dims [0]", "refuse", tset("output", 0, "dims", [0]))
    a("as", "out0_dims_minus3", "OUTPUT0 dims [-3]", "refuse", tset("output", 0, "dims", [-3]))
    # reshape
    a("as", "in0_reshape_2x2", "INPUT0 dims [4] reshape [2, 2] (same element count)", "load",
      tset("input", 0, "reshape", {"shape": [2, 2]}))
    a("as", "in0_reshape_mismatch", "INPUT0 dims [4] reshape [3] (element counts differ)", "refuse",
      tset("input", 0, "reshape", {"shape": [3]}))
    a("as", "in0_reshape_scalar", "INPUT0 dims [1] reshape [] (to a scalar)", "refuse",
      chain(tset("input", 0, "dims", [1]), tset("input", 0, "reshape", {"shape": Raw("[]")})))
    a("as", "in0_reshape_var", "INPUT0 dims [-1] reshape [-1]", "load",
      chain(tset("input", 0, "dims", [-1]), tset("input", 0, "reshape", {"shape": [-1]})))
    a("as", "in0_reshape_var_split", "INPUT0 dims [4] reshape [2, -1] (variable dim against a fixed one)", "refuse",
      tset("input", 0, "reshape", {"shape": [2, -1]}))
    a("as", "in0_reshape_zero", "INPUT0 dims [4] reshape [0]", "refuse", tset("input", 0, "reshape", {"shape": [0]}))
    a("as", "out0_reshape_2x2", "OUTPUT0 dims [4] reshape [2, 2]", "load",
      tset("output", 0, "reshape", {"shape": [2, 2]}))
    a("as", "out0_reshape_mismatch", "OUTPUT0 dims [4] reshape [5]", "refuse",
      tset("output", 0, "reshape", {"shape": [5]}))
    # max_batch_size
    a("as", "mbs_negative", "max_batch_size -1", "refuse", setf("max_batch_size", -1))
    a("as", "mbs_8_no_dynbatch", "max_batch_size 8 without dynamic_batching", "load", setf("max_batch_size", 8))
    a("as", "mbs_too_big", "max_batch_size 2147483648 (does not fit int32: parse error)", "refuse",
      setf("max_batch_size", 2147483648))
    a("as", "mbs_quoted", 'max_batch_size "8" (a string where an int is expected)', "refuse",
      setf("max_batch_size", "8"))
    a("as", "mbs_bool", "max_batch_size true (a bool where an int is expected)", "refuse", setf("max_batch_size", True))
    a("as", "mbs0_dynbatch", "max_batch_size 0 with dynamic_batching", "load",
      setf("dynamic_batching", {"max_queue_delay_microseconds": 100}))
    # names
    a("as", "dup_input", "two inputs named INPUT0", "load", tset("input", 1, "name", "INPUT0"))
    a("as", "dup_output", "two outputs named OUTPUT0", "load", tset("output", 1, "name", "OUTPUT0"))
    a("as", "input_named_like_output", "an input and an output both named OUTPUT0", "load",
      tset("input", 0, "name", "OUTPUT0"))
    a("as", "in0_name_missing", "INPUT0 entry without a name", "refuse", tdel("input", 0, "name"))
    a("as", "out0_name_missing", "OUTPUT0 entry without a name", "refuse", tdel("output", 0, "name"))
    a("as", "in0_name_spaces", 'input named "INPUT 0" (a space in the name)', "load",
      tset("input", 0, "name", "INPUT 0"))
    a("as", "no_inputs", "no inputs at all", "load", delf("input"))
    a("as", "no_outputs", "no outputs at all", "load", delf("output"))
    a("as", "name_mismatch", "config name differs from the folder name", "refuse", setf("name", "some_other_model"))
    a("as", "name_omitted", "config without name (the folder name is used)", "load", delf("name"))
    # backend / platform
    a("as", "backend_missing", "neither backend nor platform", "load", delf("backend"))
    a("as", "backend_unknown", 'backend "nosuch_backend"', "refuse", setf("backend", "nosuch_backend"))
    a("as", "backend_uppercase", 'backend "Python" (backend names are case-sensitive)', "refuse",
      setf("backend", "Python"))
    a("as", "platform_python", 'platform "python" instead of backend "python"', "refuse",
      chain(delf("backend"), setf("platform", "python")))
    a("as", "platform_conflict", 'backend "python" with platform "onnxruntime_onnx"', "load",
      setf("platform", "onnxruntime_onnx"))
    a("as", "platform_ensemble_no_steps", 'platform "ensemble" (and backend python) without ensemble_scheduling',
      "refuse",
      chain(delf("backend"), setf("platform", "ensemble")))
    # unknown fields and syntax
    a("as", "unknown_field", "unknown top-level field foo: 1", "refuse", setf("foo", 1))
    a("as", "misspelled_field", "misspelled field max_batchsize", "refuse",
      chain(delf("max_batch_size"), setf("max_batchsize", 0)))
    a("as", "unknown_tensor_field", "input with shape: [4] instead of dims", "refuse",
      chain(tdel("input", 0, "dims"), tset("input", 0, "shape", [4])))
    a("as", "syntax_missing_brace", "the closing brace of the last input entry removed", "refuse",
      sub("  }\n]\n", "\n]\n"))
    a("as", "syntax_missing_bracket", "input list without its closing bracket", "refuse",
      sub("]\noutput [", "\noutput ["))
    a("as", "syntax_unterminated_string", "backend string without its closing quote", "refuse",
      sub('backend: "python"', 'backend: "python'))
    a("as", "syntax_bad_kind", "instance_group kind KIND_FOO (no such enum value)", "refuse",
      ig(count=1, kind=Sym("KIND_FOO")))
    a("as", "syntax_int_for_string", "backend: 5 (an int where a string is expected)", "refuse",
      setf("backend", Raw("5")))
    a("as", "syntax_duplicate_scalar", "max_batch_size given twice", "load",
      sub("max_batch_size: 0\n", "max_batch_size: 0\nmax_batch_size: 0\n"))
    a("as", "syntax_trailing_garbage", "an extra closing brace at the end", "refuse", text(lambda t: t + "}\n"))
    a("as", "syntax_separators", "fields separated by commas and semicolons", "load",
      text(lambda t: t.replace('backend: "python"\n', 'backend: "python";\n').replace("max_batch_size: 0\n",
                                                                                      "max_batch_size: 0,\n")))
    a("as", "syntax_colon_before_list", "input: [ ... ] (optional colon before a message list)", "load",
      sub("input [", "input: ["))
    a("as", "syntax_json", "a JSON document instead of protobuf text format", "refuse",
      text(lambda t: '{"name": "x", "backend": "python"}\n'))
    a("as", "config_empty", "an empty config.pbtxt", "load", text(lambda t: ""))
    # instance_group
    a("as", "ig_count0", "instance_group count 0", "load", ig(count=0, kind=Sym("KIND_CPU")))
    a("as", "ig_count_negative", "instance_group count -1", "load", ig(count=-1, kind=Sym("KIND_CPU")))
    a("as", "ig_kind_gpu", "instance_group KIND_GPU on a server without GPUs", "refuse",
      ig(count=1, kind=Sym("KIND_GPU")))
    a("as", "ig_kind_gpu_gpus", "instance_group KIND_GPU gpus [0] on a server without GPUs", "refuse",
      ig(count=1, kind=Sym("KIND_GPU"), gpus=[0]))
    a("as", "ig_cpu_count2", "instance_group KIND_CPU count 2", "load", ig(count=2, kind=Sym("KIND_CPU")))
    a("as", "ig_kind_model", "instance_group KIND_MODEL", "load", ig(count=1, kind=Sym("KIND_MODEL")))
    a("as", "ig_kind_auto", "instance_group KIND_AUTO (resolves to CPU here)", "load",
      ig(count=1, kind=Sym("KIND_AUTO")))
    a("as", "ig_cpu_with_gpus", "instance_group KIND_CPU that lists gpus [0]", "refuse",
      ig(count=1, kind=Sym("KIND_CPU"), gpus=[0]))
    a("as", "ig_two_groups", "two KIND_CPU instance groups", "load",
      setf("instance_group", [{"name": "a", "count": 1, "kind": Sym("KIND_CPU")},
                              {"name": "b", "count": 1, "kind": Sym("KIND_CPU")}]))
    a("as", "ig_removed", "no instance_group", "load", delf("instance_group"))
    # decoupled policy vs code
    a("as", "decoupled_plain_code", "decoupled: true but model.py returns responses (not decoupled code)", "load",
      setf("model_transaction_policy", {"decoupled": True}))
    # parameters, cache, warmup, optional
    a("as", "param_env_path_missing", "parameters EXECUTION_ENV_PATH pointing at a missing archive", "refuse",
      setf("parameters", [{"key": "EXECUTION_ENV_PATH", "value": {"string_value": "/nonexistent/env.tar.gz"}}]))
    a("as", "param_custom", "a custom string parameter", "load",
      setf("parameters", [{"key": "threshold", "value": {"string_value": "0.5"}}]))
    a("as", "response_cache", "response_cache enable: true on a server without a cache", "load",
      setf("response_cache", {"enable": True}))
    a("as", "warmup_zero_data", "model_warmup with zero_data for both inputs", "load",
      setf("model_warmup", [{"name": "w", "batch_size": 1, "inputs": [
          {"key": "INPUT0", "value": {"data_type": Sym("TYPE_FP32"), "dims": [4], "zero_data": True}},
          {"key": "INPUT1", "value": {"data_type": Sym("TYPE_FP32"), "dims": [4], "zero_data": True}}]}]))
    a("as", "warmup_unknown_input", "model_warmup whose only input is not an input of the model", "refuse",
      setf("model_warmup", [{"name": "w", "batch_size": 1, "inputs": [
          {"key": "NOPE", "value": {"data_type": Sym("TYPE_FP32"), "dims": [4], "zero_data": True}}]}]))
    a("as", "optional_input", "INPUT1 optional: true", "load", tset("input", 1, "optional", True))
    a("as", "shape_tensor", "INPUT0 is_shape_tensor: true (Python backend)", "refuse",
      chain(tset("input", 0, "data_type", Sym("TYPE_INT32")), tset("input", 0, "is_shape_tensor", True)))
    a("as", "ragged_unbatched", "INPUT0 allow_ragged_batch with max_batch_size 0", "load",
      tset("input", 0, "allow_ragged_batch", True))
    a("as", "batch_input_unbatched", "batch_input with max_batch_size 0", "load",
      setf("batch_input", [{"kind": Sym("BATCH_ELEMENT_COUNT"), "target_name": ["COUNT"],
                            "data_type": Sym("TYPE_FP32"), "source_input": ["INPUT0"]}]))
    # version_policy
    a("as", "vp_latest_1_two_versions", "version_policy latest 1 with versions 1 and 2", "load",
      chain(setf("version_policy", {"latest": {"num_versions": 1}}), addfile("2/model.py", ADDSUB_PY)))
    a("as", "vp_all_two_versions", "version_policy all with versions 1 and 2", "load",
      chain(setf("version_policy", {"all": Raw("{}")}), addfile("2/model.py", ADDSUB_PY)))
    a("as", "vp_specific_1", "version_policy specific [1]", "load",
      setf("version_policy", {"specific": {"versions": [1]}}))
    a("as", "vp_specific_missing", "version_policy specific [3], only version 1 exists", "refuse",
      setf("version_policy", {"specific": {"versions": [3]}}))
    a("as", "vp_specific_empty", "version_policy specific with no versions", "refuse",
      setf("version_policy", {"specific": Raw("{}")}))
    a("as", "vp_latest_0", "version_policy latest num_versions 0", "refuse",
      setf("version_policy", {"latest": {"num_versions": 0}}))
    a("as", "vp_two_policies", "version_policy with both latest and all (a oneof: parse error)", "refuse",
      setf("version_policy", {"latest": {"num_versions": 1}, "all": Raw("{}")}))


def _batched_cases(b: _Builder) -> None:
    a = b.add
    a("ab", "base", "base batched add/sub: max_batch_size 8 + dynamic_batching", "load")
    dyn = lambda **kw: setf("dynamic_batching", kw)  # noqa: E731
    a("ab", "pref_4_8", "preferred_batch_size [4, 8]", "load", dyn(preferred_batch_size=[4, 8]))
    a("ab", "pref_above_max", "preferred_batch_size [16] above max_batch_size 8", "refuse",
      dyn(preferred_batch_size=[16]))
    a("ab", "pref_zero", "preferred_batch_size [0]", "refuse", dyn(preferred_batch_size=[0]))
    a("ab", "mbs0", "max_batch_size 0 but dynamic_batching kept", "load", setf("max_batch_size", 0))
    a("ab", "priority_ok", "priority_levels 2, default_priority_level 1", "load",
      dyn(priority_levels=2, default_priority_level=1))
    a("ab", "priority_default_too_high", "priority_levels 2, default_priority_level 3", "refuse",
      dyn(priority_levels=2, default_priority_level=3))
    a("ab", "priority_levels_no_default", "priority_levels 2 without default_priority_level", "refuse",
      dyn(priority_levels=2))
    a("ab", "queue_policy", "default_queue_policy REJECT after 1000 us", "load",
      dyn(default_queue_policy={"timeout_action": Sym("REJECT"), "default_timeout_microseconds": 1000}))
    a("ab", "queue_policy_bad_action", "default_queue_policy timeout_action DROP (no such enum value)", "refuse",
      dyn(default_queue_policy={"timeout_action": Sym("DROP")}))
    a("ab", "in0_dims_empty", "INPUT0 without dims while batching (batch dim only)", "refuse", tdel("input", 0, "dims"))
    a("ab", "in0_dims_1_reshape_scalar", "INPUT0 dims [1] reshape [] while batching", "load",
      chain(tset("input", 0, "dims", [1]), tset("input", 0, "reshape", {"shape": Raw("[]")})))
    a("ab", "ragged_batch", "INPUT0 dims [-1] allow_ragged_batch: true", "load",
      chain(tset("input", 0, "dims", [-1]), tset("input", 0, "allow_ragged_batch", True)))
    a("ab", "batch_input", "batch_input BATCH_ELEMENT_COUNT for a ragged INPUT0", "load",
      chain(tset("input", 0, "dims", [-1]), tset("input", 0, "allow_ragged_batch", True),
            setf("batch_input", [{"kind": Sym("BATCH_ELEMENT_COUNT"), "target_name": ["COUNT"],
                                  "data_type": Sym("TYPE_FP32"), "source_input": ["INPUT0"]}])))
    a("ab", "decoupled", "batched model with decoupled: true", "load",
      setf("model_transaction_policy", {"decoupled": True}))
    a("ab", "ig_kind_gpu", "batched model with KIND_GPU", "refuse", ig(count=1, kind=Sym("KIND_GPU")))
    a("ab", "dyn_and_sequence", "dynamic_batching and sequence_batching together (a oneof: parse error)", "refuse",
      setf("sequence_batching", Raw("{}")))


def _bytes_cases(b: _Builder) -> None:
    a = b.add
    a("by", "base", "base BYTES in/out Python model, dims [-1]", "load")
    a("by", "type_bytes", "TEXT data_type TYPE_BYTES (BYTES is TYPE_STRING in config.pbtxt: parse error)", "refuse",
      tset("input", 0, "data_type", Sym("TYPE_BYTES")))
    a("by", "out_type_bytes", "TEXT_OUT data_type TYPE_BYTES", "refuse",
      tset("output", 0, "data_type", Sym("TYPE_BYTES")))
    a("by", "dims_1", "TEXT dims [1]", "load", tset("input", 0, "dims", [1]))
    a("by", "batched", "max_batch_size 4 + dynamic_batching", "load",
      chain(setf("max_batch_size", 4), setf("dynamic_batching", Raw("{}"))))
    a("by", "model_py_syntax", "model.py that does not compile", "refuse",
      addfile("1/model.py", BYTES_PY.replace("def execute(self, requests):", "def execute(self, requests)")))


def _decoupled_cases(b: _Builder) -> None:
    a = b.add
    a("dc", "base", "base decoupled Python model (response sender)", "load")
    a("dc", "policy_false", "decoupled: false while model.py uses the response sender", "load",
      setf("model_transaction_policy", {"decoupled": False}))
    a("dc", "decoupled_quoted", 'decoupled: "true" (a string where a bool is expected)', "refuse",
      setf("model_transaction_policy", {"decoupled": "true"}))
    a("dc", "decoupled_numeric", "decoupled: 1 (protobuf text accepts 0/1 for bools)", "load",
      setf("model_transaction_policy", {"decoupled": Raw("1")}))
    a("dc", "policy_unknown_field", "model_transaction_policy { streaming: true } (no such field)", "refuse",
      setf("model_transaction_policy", {"streaming": True}))
    a("dc", "batched", "decoupled with max_batch_size 8 + dynamic_batching", "load",
      chain(setf("max_batch_size", 8), setf("dynamic_batching", Raw("{}"))))
    a("dc", "kind_gpu", "decoupled model with KIND_GPU", "refuse", ig(count=1, kind=Sym("KIND_GPU")))
    a("dc", "no_model_py_class", "model.py without a TritonPythonModel class", "refuse",
      addfile("1/model.py", "import numpy as np\n\n\nclass Model:\n    pass\n"))


def _sequence_cases(b: _Builder) -> None:
    a = b.add

    def ctl(i: int, **kw):
        return seq_edit(lambda s: s["control_input"][i]["control"][0].update(kw))

    def ctl_drop(i: int, key: str):
        return seq_edit(lambda s: s["control_input"][i]["control"][0].pop(key))

    def add_control(name: str, kind: str, **values):
        return seq_edit(lambda s: s["control_input"].append(_control(name, kind, **values)))

    a("sq", "base", "base sequence model: sequence_batching, START/READY controls, max_batch_size 8", "load")
    a("sq", "mbs0", "sequence_batching with max_batch_size 0", "load", setf("max_batch_size", 0))
    a("sq", "start_no_values", "START control without int32_false_true", "refuse", ctl_drop(0, "int32_false_true"))
    a("sq", "start_two_value_kinds", "START control with int32_false_true and fp32_false_true", "refuse",
      ctl(0, fp32_false_true=[0.0, 1.0]))
    a("sq", "start_one_value", "START control int32_false_true [1] (needs two values)", "refuse",
      ctl(0, int32_false_true=[1]))
    a("sq", "start_fp32", "START control with fp32_false_true", "load",
      chain(ctl_drop(0, "int32_false_true"), ctl(0, fp32_false_true=[0.0, 1.0])))
    a("sq", "start_bool", "START control with bool_false_true", "load",
      chain(ctl_drop(0, "int32_false_true"), ctl(0, bool_false_true=[False, True])))
    a("sq", "duplicate_start", "two CONTROL_SEQUENCE_START controls", "refuse",
      add_control("START2", "CONTROL_SEQUENCE_START", int32_false_true=[0, 1]))
    a("sq", "control_kind_unknown", "control kind CONTROL_SEQUENCE_BEGIN (no such enum value)", "refuse",
      ctl(0, kind=Sym("CONTROL_SEQUENCE_BEGIN")))
    a("sq", "corrid_uint64", "CONTROL_SEQUENCE_CORRID with data_type TYPE_UINT64", "load",
      add_control("CORRID", "CONTROL_SEQUENCE_CORRID", data_type=Sym("TYPE_UINT64")))
    a("sq", "corrid_fp32", "CONTROL_SEQUENCE_CORRID with data_type TYPE_FP32", "refuse",
      add_control("CORRID", "CONTROL_SEQUENCE_CORRID", data_type=Sym("TYPE_FP32")))
    a("sq", "corrid_no_type", "CONTROL_SEQUENCE_CORRID without data_type", "refuse",
      add_control("CORRID", "CONTROL_SEQUENCE_CORRID"))
    a("sq", "control_named_like_input", "READY control named INPUT, like the model input", "load",
      seq_edit(lambda s: s["control_input"][1].__setitem__("name", "INPUT")))
    a("sq", "control_no_name", "READY control without a name", "refuse",
      seq_edit(lambda s: s["control_input"][1].pop("name")))
    a("sq", "no_controls", "sequence_batching without control inputs", "load",
      seq_edit(lambda s: s.pop("control_input")))
    a("sq", "oldest", "oldest strategy with max_candidate_sequences 4", "load",
      seq_edit(lambda s: s.__setitem__("oldest", {"max_candidate_sequences": 4, "max_queue_delay_microseconds": 100})))
    a("sq", "direct_and_oldest", "direct and oldest together (a oneof: parse error)", "refuse",
      seq_edit(lambda s: s.update(direct=Raw("{}"), oldest={"max_candidate_sequences": 4})))
    a("sq", "state", "implicit state INPUT_STATE/OUTPUT_STATE FP32 [1]", "load",
      seq_edit(lambda s: s.__setitem__("state", [{"input_name": "INPUT_STATE", "output_name": "OUTPUT_STATE",
                                                    "data_type": Sym("TYPE_FP32"), "dims": [1]}])))
    a("sq", "state_no_dims", "implicit state without dims", "load",
      seq_edit(lambda s: s.__setitem__("state", [{"input_name": "INPUT_STATE", "output_name": "OUTPUT_STATE",
                                                    "data_type": Sym("TYPE_FP32")}])))
    a("sq", "with_dynbatch", "sequence_batching plus dynamic_batching (a oneof: parse error)", "refuse",
      setf("dynamic_batching", Raw("{}")))
    a("sq", "decoupled", "sequence model with decoupled: true", "load",
      setf("model_transaction_policy", {"decoupled": True}))


def _ensemble_cases(b: _Builder) -> None:
    def a(suffix: str, desc: str, expect: str, fn=None) -> None:
        b.add("en", suffix, desc, expect, ens=fn)

    def steps(ds):
        return ds["main"].config["ensemble_scheduling"]["step"]

    def set_map(step: int, which: str, key: str, value: str | None = None, new_key: str | None = None):
        """Change one entry of a step's input_map/output_map (value, key, or both)."""
        def fn(ds):
            for entry in steps(ds)[step][which]:
                if entry["key"] == key:
                    if value is not None:
                        entry["value"] = value
                    if new_key is not None:
                        entry["key"] = new_key
                    return
            raise AssertionError(f"corpus edit: no {which} key {key}")
        return fn

    a("base", "base ensemble: add/sub then scale, tensors mapped by name", "load")
    a("unknown_model", "a step names a model that does not exist", "refuse",
      lambda ds: steps(ds)[1].__setitem__("model_name", "no_such_model_anywhere"))
    a("input_map_bad_key", "a step's input_map key is not an input of the step model", "refuse",
      set_map(0, "input_map", "INPUT1", new_key="INPUTX"))
    a("input_map_undefined_tensor", "a step reads an ensemble tensor nobody produces", "refuse",
      set_map(1, "input_map", "X", value="nope"))
    a("output_map_bad_key", "a step's output_map key is not an output of the step model", "refuse",
      set_map(0, "output_map", "OUTPUT1", new_key="OUTPUT9"))
    a("step_input_unmapped", "a step leaves one of its model's inputs unmapped", "refuse",
      lambda ds: steps(ds)[0]["input_map"].pop(1))
    a("step_output_unmapped", "a step leaves an output unmapped (DIFF then comes from nowhere)", "refuse",
      lambda ds: steps(ds)[0]["output_map"].pop(1))
    a("step_output_unused", "a step output mapped to a tensor that nothing consumes", "refuse",
      chain_ens(set_map(0, "output_map", "OUTPUT1", value="unused_diff"),
                lambda ds: ds["main"].config["output"].pop(1)))
    a("dtype_mismatch_steps", "post's input X is INT32 while pre produces FP32", "refuse",
      lambda ds: ds["post"].config["input"][0].__setitem__("data_type", Sym("TYPE_INT32")))
    a("dtype_mismatch_ensemble_input", "ensemble INPUT0 is FP64, pre's INPUT0 is FP32", "refuse",
      lambda ds: ds["main"].config["input"][0].__setitem__("data_type", Sym("TYPE_FP64")))
    a("dtype_mismatch_ensemble_output", "ensemble output DIFF is INT64, pre's OUTPUT1 is FP32", "refuse",
      lambda ds: ds["main"].config["output"][1].__setitem__("data_type", Sym("TYPE_INT64")))
    a("shape_mismatch_steps", "post's input X has dims [8], pre produces [4]", "refuse",
      lambda ds: ds["post"].config["input"][0].__setitem__("dims", [8]))
    a("shape_mismatch_ensemble_input", "ensemble INPUT0 dims [3], pre's INPUT0 dims [4]", "refuse",
      lambda ds: ds["main"].config["input"][0].__setitem__("dims", [3]))
    a("shape_variable_ensemble_input", "ensemble INPUT0 dims [-1] feeding pre's [4]", "load",
      lambda ds: ds["main"].config["input"][0].__setitem__("dims", [-1]))
    a("cycle", "post's output feeds pre's input (a cycle; ensemble INPUT1 unused)", "refuse",
      chain_ens(set_map(0, "input_map", "INPUT1", value="loop"), set_map(1, "output_map", "Y", value="loop"),
                lambda ds: ds["main"].config["output"].pop(0), lambda ds: ds["main"].config["input"].pop(1)))
    a("self_reference", "a step names the ensemble itself", "refuse",
      lambda ds: steps(ds)[1].__setitem__("model_name", ds["main"].dirname))
    a("undefined_output", "ensemble declares an output EXTRA that no step produces", "refuse",
      lambda ds: ds["main"].config["output"].append(tensor("EXTRA", "TYPE_FP32", [4])))
    a("unused_input", "ensemble declares an input INPUT2 that no step reads", "refuse",
      lambda ds: ds["main"].config["input"].append(tensor("INPUT2", "TYPE_FP32", [4])))
    a("tensor_written_twice", "two steps write the same ensemble tensor DIFF", "refuse",
      set_map(1, "output_map", "Y", value="DIFF"))
    a("output_overwrites_input", "a step writes to the ensemble input tensor INPUT0", "refuse",
      set_map(0, "output_map", "OUTPUT0", value="INPUT0"))
    a("missing_model_version", "a step asks for version 2 of pre (only 1 exists)", "refuse",
      lambda ds: steps(ds)[0].__setitem__("model_version", 2))
    a("no_steps", "ensemble_scheduling with no steps", "refuse",
      lambda ds: ds["main"].config.__setitem__("ensemble_scheduling", Raw("{}")))
    a("no_scheduling", 'platform "ensemble" without ensemble_scheduling', "refuse",
      lambda ds: ds["main"].config.pop("ensemble_scheduling"))
    a("platform_typo", 'platform "ensembles"', "refuse",
      lambda ds: ds["main"].config.__setitem__("platform", "ensembles"))
    a("with_backend", 'ensemble that also says backend "python"', "refuse",
      lambda ds: ds["main"].config.__setitem__("backend", "python"))
    a("mbs_above_steps", "ensemble max_batch_size 8 over non-batching steps", "load",
      lambda ds: ds["main"].config.__setitem__("max_batch_size", 8))

    def batched(ds):
        for role in ("main", "pre", "post"):
            ds[role].config["max_batch_size"] = 8
        ds["pre"].config["dynamic_batching"] = {}
    a("batched", "ensemble and both steps with max_batch_size 8", "load", batched)
    a("composing_broken", "pre's config has INPUT0 TYPE_INVALID (a step that cannot load)", "refuse",
      lambda ds: ds["pre"].config["input"][0].__setitem__("data_type", Sym("TYPE_INVALID")))
    a("composing_missing_model_py", "pre has no model.py", "refuse",
      lambda ds: ds["pre"].files.pop("1/model.py"))
    a("optional_input", "ensemble INPUT1 optional: true", "load",
      lambda ds: ds["main"].config["input"][1].__setitem__("optional", True))
    a("instance_group", "ensemble with an instance_group", "refuse",
      lambda ds: ds["main"].config.__setitem__("instance_group", [{"count": 1, "kind": Sym("KIND_CPU")}]))
    a("no_version_dir", "ensemble folder without a version folder", "refuse",
      lambda ds: ds["main"].files.pop("1"))
    a("decoupled_step", "post is decoupled (decoupled model inside an ensemble)", "refuse",
      lambda ds: ds["post"].config.__setitem__("model_transaction_policy", {"decoupled": True}))


def chain_ens(*fns):
    def run(ds):
        for f in fns:
            f(ds)
    return run


def _vllm_cases(b: _Builder) -> None:
    a = b.add
    a("vl", "base", "the toolkit's vLLM config (stand-in backend checks 1/model.json)", "load")
    a("vl", "no_model_json", "no 1/model.json (only the empty version folder)", "refuse",
      chain(nofile("1/model.json"), addfile("1", DIR)))
    a("vl", "model_json_broken", "1/model.json is not JSON", "refuse", addfile("1/model.json", "{model: tiny\n"))
    a("vl", "not_decoupled", "decoupled: false (the backend's auto-complete may not change it)", "refuse",
      setf("model_transaction_policy", {"decoupled": False}))
    a("vl", "backend_typo", 'backend "vllm_engine" (not in the backend directory)', "refuse",
      setf("backend", "vllm_engine"))
    a("vl", "kind_gpu", "instance_group KIND_GPU on a server without GPUs", "refuse", ig(count=1, kind=Sym("KIND_GPU")))
    a("vl", "kind_cpu", "instance_group KIND_CPU", "load", ig(count=1, kind=Sym("KIND_CPU")))
    a("vl", "text_input_bytes_type", "text_input data_type TYPE_BYTES", "refuse",
      tset("input", 0, "data_type", Sym("TYPE_BYTES")))
    a("vl", "dup_input", "two inputs named text_input", "load", tset("input", 1, "name", "text_input"))
    a("vl", "no_version_dir", "no version folder at all", "refuse", nofile("1/model.json"))
    a("vl", "stream_not_optional", "stream input without optional (clients must then always send it)", "load",
      tdel("input", 1, "optional"))


def _vllm_sample_cases(b: _Builder) -> None:
    a = b.add
    a("vs", "base", "NVIDIA's vllm sample: backend and instance group only, auto-complete does the rest", "load")
    a("vs", "decoupled_false", "decoupled: false written (auto-complete may not change it)", "refuse",
      setf("model_transaction_policy", {"decoupled": False}))
    a("vs", "policy_empty", "model_transaction_policy { } (decoupled false, written)", "refuse",
      setf("model_transaction_policy", {}))
    a("vs", "max_batch_size_8", "max_batch_size 8 (auto-complete sets 0 and may not lower it)", "refuse",
      setf("max_batch_size", 8))
    a("vs", "text_input_no_type", "text_input with dims only (auto-complete keeps a written input as it is)",
      "refuse", setf("input", [{"name": "text_input", "dims": [1]}]))
    a("vs", "text_input_fp32", "text_input TYPE_FP32 (auto-complete keeps a written input as it is)", "load",
      setf("input", [tensor("text_input", "TYPE_FP32", [1])]))
    a("vs", "sequence_batching", "sequence_batching beside auto-complete's max_batch_size 0", "load",
      setf("sequence_batching", {}))
    a("vs", "no_model_json", "no 1/model.json (only the empty version folder)", "refuse",
      chain(nofile("1/model.json"), addfile("1", DIR)))


def _layout_cases(b: _Builder) -> None:
    a = b.add
    a("rp", "no_config", "no config.pbtxt (Python backend model.py only)", "load", noconfig())
    a("rp", "config_misnamed", "config.txt instead of config.pbtxt", "load", rename_config("config.txt"))
    a("rp", "no_version_dir", "model folder without a version folder", "refuse", nofile("1/model.py"))
    a("rp", "version_nonnumeric_only", "only a version folder named v1", "refuse",
      chain(nofile("1/model.py"), addfile("v1/model.py", ADDSUB_PY)))
    a("rp", "version_nonnumeric_extra", "version 1 plus a folder named latest", "load",
      addfile("latest/model.py", ADDSUB_PY))
    a("rp", "version_zero", "only version folder 0", "load",
      chain(nofile("1/model.py"), addfile("0/model.py", ADDSUB_PY)))
    a("rp", "version_leading_zero", "only version folder 01", "refuse",
      chain(nofile("1/model.py"), addfile("01/model.py", ADDSUB_PY)))
    a("rp", "version_negative", "only version folder -1", "refuse",
      chain(nofile("1/model.py"), addfile("-1/model.py", ADDSUB_PY)))
    a("rp", "version_empty_dir", "version folder 1 without model.py", "refuse",
      chain(nofile("1/model.py"), addfile("1", DIR)))
    a("rp", "model_py_in_root", "model.py beside config.pbtxt instead of in 1/", "refuse",
      chain(nofile("1/model.py"), addfile("model.py", ADDSUB_PY), addfile("1", DIR)))
    a("rp", "two_versions_one_empty", "version 1 with model.py and an empty version 2 (latest policy picks 2)",
      "refuse",
      addfile("2", DIR))
    a("rp", "model_py_syntax_error", "model.py that does not compile", "refuse",
      addfile("1/model.py", ADDSUB_PY + "\nif True\n    pass\n"))
    a("rp", "model_py_no_class", "model.py without TritonPythonModel", "refuse", addfile("1/model.py", "x = 1\n"))
    a("rp", "default_model_filename", "default_model_filename addsub.py (and no model.py)", "load",
      chain(setf("default_model_filename", "addsub.py"), nofile("1/model.py"), addfile("1/addsub.py", ADDSUB_PY)))
    a("rp", "default_model_filename_missing", "default_model_filename names a file that is not there", "refuse",
      setf("default_model_filename", "nothere.py"))


def build_cases() -> list[Case]:
    """The whole corpus, in a fixed order. Names are unique and double as model folder names."""
    b = _Builder()
    _addsub_cases(b)
    _batched_cases(b)
    _bytes_cases(b)
    _decoupled_cases(b)
    _sequence_cases(b)
    _ensemble_cases(b)
    _vllm_cases(b)
    _vllm_sample_cases(b)
    _layout_cases(b)
    names = [c.name for c in b.cases]
    assert len(names) == len(set(names)), "duplicate case names"
    models = [m for c in b.cases for m in c.model_names]
    assert len(models) == len(set(models)), "duplicate model folder names"
    return b.cases


def backend_sources(dest: Path, real_backends: Path | None = None) -> Path:
    """A folder laid out like the project's backends/ (one `<name>/model.py` per Python-based backend)
    holding only the vLLM stand-in, which takes its auto-complete from `real_backends`/vllm/model.py (the
    toolkit's, the one validate reads); the runtime links it into the corpus server's backend directory."""
    from tritonpkg import paths

    real = (real_backends or paths.backends_dir()).resolve() / "vllm" / "model.py"
    (dest / "vllm").mkdir(parents=True, exist_ok=True)
    (dest / "vllm" / "model.py").write_text(VLLM_STANDIN_PY.replace("@REAL_BACKEND@", repr(str(real))),
                                            encoding="utf-8")
    return dest
