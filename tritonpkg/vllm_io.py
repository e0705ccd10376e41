"""The vLLM backend's I/O contract as tritonpkg reads it: backends/vllm/io_contract.json, the file the backend
itself reads inside Triton's stub. `tritonpkg package` writes config.pbtxt's inputs and outputs from it and
the OpenAI frontend asks for the additional outputs it names, so the three say the same thing."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from tritonpkg import paths
from tritonpkg.errors import PackageError

Kind = Literal["generate", "embed"]


class ContractTensor(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False
    nvidia_since: str | None = None  # the first NVIDIA release whose vLLM backend accepts it
    toolkit_only: bool = False  # NVIDIA's backend has no tensor of that name: a config declaring it needs the toolkit's

    def accepted_by(self, release: str) -> bool:
        return self.nvidia_since is None or _release(release) >= _release(self.nvidia_since)


class PackagedIO(BaseModel):
    """What `package` declares for one kind of model; the backend auto-completes the rest when it serves it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    by_target_release: bool  # leave out what NVIDIA's backend of the spec's target_release does not accept


class AdapterList(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    about: str = ""
    file: str  # NVIDIA's multi_lora.json
    served: str  # the backend's acknowledgement of the list it serves, beside it


class VllmContract(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    about: str = ""
    inputs: tuple[ContractTensor, ...]
    outputs: tuple[ContractTensor, ...]
    return_flags: dict[str, str]  # BOOL input -> the additional output it asks for
    packaged: dict[Kind, PackagedIO]
    adapter_list: AdapterList

    @model_validator(mode="after")
    def _names_exist(self) -> VllmContract:
        inputs, outputs = {t.name for t in self.inputs}, {t.name for t in self.outputs}
        for flag, output in self.return_flags.items():
            if flag not in inputs or output not in outputs:
                raise ValueError(f"return_flags.{flag}: names an input and an output the contract lacks")
        for kind, io in self.packaged.items():
            missing = sorted(set(io.inputs) - inputs) + sorted(set(io.outputs) - outputs)
            if missing:
                raise ValueError(f"packaged.{kind}: unknown tensor(s) {', '.join(missing)}")
        return self

    def packaged_io(self, kind: Kind, target_release: str) -> tuple[list[ContractTensor], list[ContractTensor]]:
        """config.pbtxt's inputs and outputs (in the order `packaged` lists them) for a model of `kind` aimed at
        NVIDIA's `target_release`."""
        io = self.packaged[kind]
        by_name = {t.name: t for t in (*self.inputs, *self.outputs)}

        def keep(name: str) -> bool:
            return not io.by_target_release or by_name[name].accepted_by(target_release)

        return [by_name[n] for n in io.inputs if keep(n)], [by_name[n] for n in io.outputs if keep(n)]

    def toolkit_only(self) -> frozenset[str]:
        """Names of the tensors only the toolkit's backend has (a config.pbtxt declaring one needs that backend)."""
        return frozenset(t.name for t in (*self.inputs, *self.outputs) if t.toolkit_only)

    def flags_for(self, outputs: tuple[str, ...]) -> tuple[str, ...]:
        """The return_* inputs that ask for `outputs`, in that order."""
        by_output = {output: flag for flag, output in self.return_flags.items()}
        missing = [o for o in outputs if o not in by_output]
        if missing:
            raise PackageError(f"no return flag asks for {', '.join(missing)}", file=contract_path(),
                               field="return_flags", expected="an entry per additional output")
        return tuple(by_output[o] for o in outputs)


def contract_path() -> Path:
    return paths.backends_dir() / "vllm" / "io_contract.json"


def load() -> VllmContract:
    return _load(contract_path())


def load_toolkit() -> VllmContract:
    """The toolkit's own backend's contract, whatever backend directory TRITONPKG_BACKENDS names."""
    return _load(paths._asset("backends") / "vllm" / "io_contract.json")


@cache
def _load(path: Path) -> VllmContract:
    try:
        return VllmContract.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise PackageError(f"cannot read the vLLM backend's I/O contract ({exc.strerror})", file=path,
                           expected="backends/vllm/io_contract.json of the toolkit") from None
    except json.JSONDecodeError as exc:
        raise PackageError(f"not valid JSON ({exc})", file=path) from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'contract'}: {e['msg']}" for e in exc.errors())
        raise PackageError(f"not a valid I/O contract: {problems}", file=path) from None


def _release(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))
