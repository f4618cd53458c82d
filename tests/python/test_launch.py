"""Loading the launcher library: where it is looked for, and the errors when it cannot be used."""
import ctypes.util
import os

import pytest

import ktune
from ktune import launch


@pytest.fixture(autouse=True)
def fresh_library(monkeypatch):
    monkeypatch.setattr(launch, "_library", None)
    yield
    launch._library = None


def test_a_missing_library_says_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setenv("KTUNE_LIBRARY", str(tmp_path / "libktune_launch.so"))
    with pytest.raises(ktune.LauncherUnavailable) as info:
        ktune.Launcher(0)
    message = str(info.value)
    assert str(tmp_path / "libktune_launch.so") in message and "KTUNE_LIBRARY" in message
    assert isinstance(info.value, ktune.Error) and isinstance(info.value, OSError)


def test_a_library_that_is_not_the_launcher_is_refused(monkeypatch):
    libm = ctypes.util.find_library("m")
    if libm is None:
        pytest.skip("no libm to stand in for a foreign library")
    monkeypatch.setenv("KTUNE_LIBRARY", libm)
    with pytest.raises(ktune.LauncherUnavailable, match="not the ktune launcher"):
        launch.load_library()


def test_the_search_order_is_env_then_package_then_loader(monkeypatch):
    monkeypatch.setenv("KTUNE_LIBRARY", "/x/libktune_launch.so")
    hows = [how for how, _ in launch.library_candidates()]
    assert hows[:2] == ["KTUNE_LIBRARY", "package folder"]
    monkeypatch.delenv("KTUNE_LIBRARY")
    assert launch.library_candidates()[0][0] == "package folder"


def _built_library():
    path = os.environ.get("KTUNE_LIBRARY")
    if not path or not os.path.exists(path):
        pytest.skip(f"libktune_launch.so is not built here (KTUNE_LIBRARY={path!r})")
    return path


def test_the_built_library_speaks_this_abi():
    _built_library()
    assert launch.load_library().ktune_launch_abi_version() == launch.ABI_VERSION


def test_no_driver_is_a_clear_error():
    _built_library()
    if os.path.exists("/dev/nvidiactl") and ctypes.util.find_library("cuda"):
        pytest.skip("this machine has a CUDA driver")
    with pytest.raises(ktune.FailedPrecondition) as info:
        ktune.Launcher(0)
    assert "libcuda" in str(info.value) or "driver" in str(info.value)
