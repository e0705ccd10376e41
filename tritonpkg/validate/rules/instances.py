"""instance_group as the 2.51 core checks it. On a server without GPUs:
"instance group m_0 of model m has kind KIND_GPU but no GPUs are available"; a listed gpu id
"specifies invalid or unsupported gpu id"; KIND_CPU with gpus "specifies one or more GPUs".
count <= 0 loads as count 1 (seen on the real server), so it is a warning."""

from __future__ import annotations

from collections.abc import Iterator

from tritonclient.grpc import model_config_pb2 as pb

from tritonpkg.validate.context import Context
from tritonpkg.validate.loaded import LoadedModel
from tritonpkg.validate.report import Problem

IG = pb.ModelInstanceGroup


def instance_groups(m: LoadedModel, ctx: Context) -> Iterator[Problem]:
    if m.config is None:
        return
    if m.is_ensemble:
        if len(m.config.instance_group):
            yield m.problem("instance.ensemble", "error", "an ensemble has no instances of its own",
                            field="instance_group[0]", expected="no instance_group on a platform: \"ensemble\" model")
        return
    for i, g in enumerate(m.config.instance_group):
        path = f"instance_group[{i}]"
        if g.count <= 0 and f"{path}.count" in m.locs:
            yield m.problem("instance.count", "warning", f"count {g.count}: Triton runs 1 instance instead",
                            field=f"{path}.count", expected=">= 1")
        if g.kind in (IG.KIND_CPU, IG.KIND_MODEL) and len(g.gpus):
            yield m.problem("instance.gpus", "error", f"kind {IG.Kind.Name(g.kind)} lists gpus {list(g.gpus)}",
                            field=f"{path}.gpus", expected="no gpus, or kind KIND_GPU")
        if g.kind == IG.KIND_GPU and ctx.is_local and ctx.gpu_count == 0:
            yield m.problem("instance.no-gpu", "error",
                            "kind KIND_GPU but the local runtime has no GPU (Triton: 'no GPUs are available')",
                            field=f"{path}.kind", expected="KIND_CPU or KIND_AUTO")
        elif ctx.is_local and len(g.gpus) and g.kind in (IG.KIND_GPU, IG.KIND_AUTO):
            bad = [d for d in g.gpus if d >= ctx.gpu_count]
            if bad:
                yield m.problem("instance.no-gpu", "error",
                                f"gpus {bad} do not exist on the local runtime ({ctx.gpu_count} GPU(s))",
                                field=f"{path}.gpus",
                                expected=f"ids below {ctx.gpu_count}" if ctx.gpu_count else "no gpus")


RULES = [instance_groups]
