"""The local rollout machinery the deploy tests drive: an executor over real tritonservers behind HAProxy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tritonpkg.deploy.drivers.local import LocalDriver
from tritonpkg.deploy.executor import Executor
from tritonpkg.deploy.gate import Limits
from tritonpkg.deploy.plan import Step
from tritonpkg.deploy.state import StateStore
from tritonpkg.runtime import Runtime


def make_executor(root: Path, runtime: Runtime, on_step: Callable[[str, Step], None] | None = None,
                  ) -> tuple[Executor, LocalDriver, StateStore]:
    """An executor whose units live under `root/work` and whose state is `root/state.db`, with a strict gate
    (no failed request, p99 under 2 s) and a short dwell between traffic steps."""
    driver = LocalDriver(root / "work", runtime=runtime, startup_timeout=60)
    store = StateStore(root / "state.db")
    executor = Executor(store, driver, limits=Limits(max_error_rate=0.0, max_p99_ms=2000), dwell_s=1.0,
                        on_step=on_step)
    return executor, driver, store


def free_port_base(n: int) -> int:
    """A base port below Linux's ephemeral range whose next `n` loopback ports are all free now."""
    import random
    import socket

    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 30000)
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError(f"no {n} consecutive free ports found")
