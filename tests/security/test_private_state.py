"""The admin key and serve's state folder follow the deploy state's rules (tritonpkg.private): a key file
that is a link, another user's, or writable by others is refused, never read or written through."""

from __future__ import annotations

import os

import pytest

from tritonpkg.private import StateDirError
from tritonpkg.runtime import admin
from tritonpkg.serve.plan import StartupOptions
from tritonpkg.serve.stack import ServingStack


def test_a_symlinked_admin_key_is_refused_and_its_target_kept(tmp_path):
    folder, target = tmp_path / "keys", tmp_path / "elsewhere"
    folder.mkdir(mode=0o700)
    target.write_text("attacker-chosen-key-0123456789")
    os.symlink(target, folder / admin.KEY_FILE)
    with pytest.raises(StateDirError, match="symlink"):
        admin.read_key(folder)
    with pytest.raises(StateDirError, match="symlink"):
        admin.write_key(folder, admin.new_key())
    assert target.read_text() == "attacker-chosen-key-0123456789"


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_an_admin_key_of_another_user_is_refused(tmp_path):
    folder = tmp_path / "keys"
    admin.write_key(folder, admin.new_key())
    os.chown(folder / admin.KEY_FILE, 54321, 54321)
    with pytest.raises(StateDirError, match="owned by uid 54321"):
        admin.read_key(folder)


def test_the_key_is_written_0600_in_a_0700_folder(tmp_path):
    folder = tmp_path / "new" / "keys"
    key = admin.new_key()
    path = admin.write_key(folder, key)
    assert (path.stat().st_mode & 0o777, folder.stat().st_mode & 0o777) == (0o600, 0o700)
    assert admin.read_key(folder) == key


def test_serve_refuses_a_state_folder_others_can_write(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    stack = ServingStack(StartupOptions(source=tmp_path, state_dir=state))
    with pytest.raises(StateDirError, match="writable by group or others"):
        stack._state()
    fresh = ServingStack(StartupOptions(source=tmp_path, state_dir=tmp_path / "fresh"))
    assert fresh._state().stat().st_mode & 0o777 == 0o700
