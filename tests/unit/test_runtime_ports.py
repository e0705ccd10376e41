"""Port choice and the refusal to start on a port someone else already serves."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tritonpkg.errors import RuntimeSetupError
from tritonpkg.proc import ports as ports_mod
from tritonpkg.proc.ports import free_ports, port_in_use
from tritonpkg.runtime import Runtime, TritonServer


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(3)
    assert len(set(ports)) == 3
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_free_ports_stay_out_of_the_ephemeral_range_another_process_binds_from() -> None:
    """The port the CI lost: chosen by bind(0), then taken by vLLM's own bind(0) while Triton started."""
    low, high = ports_mod._ephemeral_range()
    chosen = free_ports(50)
    assert len(set(chosen)) == 50
    assert all(not (low <= p <= high) for p in chosen), chosen
    # Bound by the OS's bind(0) right after: never one of ours.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert low <= s.getsockname()[1] <= high
        assert s.getsockname()[1] not in chosen


def test_free_ports_does_not_hand_out_a_port_twice_and_skips_taken_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports_mod, "_candidate_ranges", lambda: [range(41000, 41003)])
    monkeypatch.setattr(ports_mod, "_issued", set())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 41001))
        s.listen()
        first = free_ports(2)
        assert sorted(first) == [41000, 41002]
        later = free_ports(1)  # the range is used up: the OS picks one
    assert later[0] not in first and later[0] != 41001


def test_a_listening_port_is_reported_in_use() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert port_in_use(port)
        assert port_in_use(port, "0.0.0.0")
    assert not port_in_use(port)


def test_server_refuses_a_taken_port_before_launching(tmp_path: Path) -> None:
    # The runtime points at a binary that does not exist: reaching the launch would fail differently.
    rt = Runtime(version="2.51.0", server_bin=tmp_path / "nope", backend_dir=tmp_path, lib_dirs=[],
                 root=tmp_path, python_version="3.11", python_stub=tmp_path / "stub")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        srv = TritonServer(tmp_path, runtime=rt, http_port=busy)
        with pytest.raises(RuntimeSetupError) as err:
            srv.start()
    assert err.value.field == "http_port" and str(busy) in err.value.message
    assert srv.pid is None


def test_constructor_checks_repository_and_mode(tmp_path: Path) -> None:
    with pytest.raises(RuntimeSetupError, match="model repository not found"):
        TritonServer(tmp_path / "missing")
    with pytest.raises(RuntimeSetupError) as err:
        TritonServer(tmp_path, model_control="dynamic")  # type: ignore[arg-type]
    assert err.value.field == "model_control"
    with pytest.raises(RuntimeSetupError) as err:
        TritonServer(tmp_path, load_models=["m"])
    assert err.value.field == "load_models"
