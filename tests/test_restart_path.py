"""A resumed attempt's way from the rank's start to its first step: what runs at once, what is not done at all."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from roach.runtime import checkpoint as ckpt
from roach.runtime.context import Run


def _saved(path: Path, next_step: int, state) -> None:
    ckpt.save(path, {"roach": {"next_step": next_step, "job_id": 7}, "state": state})


def _run(run_dir: Path, **kw) -> Run:
    return Run(
        run_id="r1",
        job_id=7,
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node="n1",
        run_dir=run_dir,
        restart_count=1,
        **kw,
    )


def test_resume_takes_the_checkpoint_the_rank_read_while_it_started(tmp_path, monkeypatch, capsys, caplog):
    """Here torch is not imported: the thread reads the file through (into the page cache, keeping no copy: torch's
    load of a 1 GB copy in memory took 6 s on 4 ranks, bench 12) and resume() unpickles it, once."""
    _saved(tmp_path / ckpt.RESUME_FILE, 12, {"w": [1, 2, 3]})
    early = ckpt.Prefetch.start(tmp_path / ckpt.RESUME_FILE)
    assert early is not None
    early.wait()
    assert early._read is not None and early._value is None  # read whole since the rank started; nothing kept
    reads = []
    real = ckpt.load
    monkeypatch.setattr(ckpt, "load", lambda path: reads.append(path) or real(path))
    run = _run(tmp_path, prefetch=early)
    assert run.resume(default=None) == {"w": [1, 2, 3]}
    assert run.start_step == 12 and len(reads) == 1  # unpickled once, from the file the thread read
    said = capsys.readouterr().out + caplog.text  # the rank's log line: its handler's stream, or the root's capture
    assert "resumed at step 12 (checkpoint of job 7; restart count 1; read while the rank started)" in said


def test_a_module_another_thread_is_importing_is_not_imported_whole(monkeypatch):
    import colorsys

    assert ckpt._imported("colorsys") and not ckpt._imported("no_such_module_here")
    monkeypatch.setattr(colorsys.__spec__, "_initializing", True, raising=False)  # as importlib marks it meanwhile
    assert not ckpt._imported("colorsys")


def test_a_checkpoint_written_after_that_read_is_the_one_resume_returns(tmp_path):
    path = tmp_path / ckpt.RESUME_FILE
    _saved(path, 12, "old")
    early = ckpt.Prefetch.start(path)
    assert early is not None
    early.wait()
    _saved(path, 20, "new")  # the function checkpointed before it asked to resume
    run = _run(tmp_path, prefetch=early)
    assert run.resume(default=None) == "new" and run.start_step == 20


def test_an_unreadable_checkpoint_fails_in_resume_as_it_did_without_the_early_read(tmp_path):
    path = tmp_path / ckpt.RESUME_FILE
    path.write_bytes(b"not a checkpoint")
    early = ckpt.Prefetch.start(path)
    assert early is not None
    with pytest.raises(Exception) as raised:
        _run(tmp_path, prefetch=early).resume(default=None)
    with pytest.raises(type(raised.value)):
        _run(tmp_path).resume(default=None)


def test_no_early_read_without_a_checkpoint(tmp_path):
    assert ckpt.Prefetch.start(tmp_path / ckpt.RESUME_FILE) is None


def test_the_read_begins_only_once_the_rank_has_imported_the_function(tmp_path):
    """Unpickling imports the modules of what was saved; two threads importing one package at once, each from
    another end of its circular imports, can leave one of them a partly made module (sympy's, under torch's
    compiler). So the early read waits until the rank's own imports are made."""
    import colorsys

    _saved(tmp_path / ckpt.RESUME_FILE, 3, colorsys.rgb_to_hsv)  # its load imports colorsys
    sys.modules.pop("colorsys")
    early = ckpt.Prefetch.start(tmp_path / ckpt.RESUME_FILE)
    assert early is not None
    early._thread.join(0.2)
    assert early._thread.is_alive() and "colorsys" not in sys.modules
    early.release()  # rank.py: the function is imported
    early.wait()
    # torch is not imported whole here: the thread read the file's bytes only, and imported nothing
    assert "colorsys" not in sys.modules or ckpt._imported("torch")
    run = _run(tmp_path, prefetch=early)
    assert run.resume(default=None).__name__ == "rgb_to_hsv" and run.start_step == 3


DATA = Path(__file__).parent / "data"
TORCH_SAVED = DATA / "resume_torch_2.13_linear_fraction.pt"  # torch 2.13's save of a Linear and a Fraction


def test_the_modules_a_torch_checkpoint_names_are_read_without_unpickling_it(tmp_path):
    assert ckpt.pickled_modules(TORCH_SAVED) == {"torch", "torch._utils", "collections", "fractions"}
    _saved(tmp_path / "plain.pt", 1, "x")  # no torch here: a plain pickle, whose modules are not told
    assert ckpt.pickled_modules(tmp_path / "plain.pt") is None
    assert ckpt.pickled_modules(tmp_path / "absent.pt") is None


def _fake_torch(monkeypatch) -> None:
    """torch imported whole, as a function's import of it leaves it (the modules the checks look at)."""
    import collections
    import types

    for name in ("torch", "torch._utils", "torch.utils._config_module"):
        fake = types.ModuleType(name)
        fake.__spec__ = collections.__spec__
        monkeypatch.setitem(sys.modules, name, fake)


def test_the_thread_unpickles_only_what_imports_nothing(monkeypatch):
    """A state holding a class of a module the rank has not imported yet (the main thread may be importing it at
    that moment) is read as bytes, to be unpickled by the caller; once every module it names is imported whole, the
    thread unpickles it."""
    import fractions

    _fake_torch(monkeypatch)
    monkeypatch.delitem(sys.modules, "fractions")
    assert not ckpt._ready(ckpt.pickled_modules(TORCH_SAVED))
    monkeypatch.setitem(sys.modules, "fractions", fractions)
    assert ckpt._ready(ckpt.pickled_modules(TORCH_SAVED))
    monkeypatch.delitem(sys.modules, "torch")
    assert not ckpt._ready(ckpt.pickled_modules(TORCH_SAVED))


def _loads_by_thread(monkeypatch) -> list[str]:
    import threading

    names: list[str] = []
    monkeypatch.setattr(ckpt, "load", lambda path: names.append(threading.current_thread().name) or {"unpickled": 1})
    return names


def test_the_thread_unpickles_once_the_function_has_imported_torch(tmp_path, monkeypatch):
    """A function that imports torch inside itself: the thread reads the file through, waits for that import, then
    unpickles while the function forms its process group; resume() takes the state made."""
    path = tmp_path / ckpt.RESUME_FILE
    path.write_bytes(TORCH_SAVED.read_bytes())
    names = _loads_by_thread(monkeypatch)
    early = ckpt.Prefetch.start(path)
    assert early is not None
    early.release()
    slack = 100
    while early._read is None and slack:  # read through, now waiting for torch
        early._thread.join(0.05)
        slack -= 1
    assert early._thread.is_alive() and names == []
    _fake_torch(monkeypatch)  # the function imports torch
    early._thread.join(5)
    assert not early._thread.is_alive() and names == ["roach-resume-read"]
    assert early.take() == (True, {"unpickled": 1}) and names == ["roach-resume-read"]


def test_a_resume_before_the_imports_unpickles_in_its_own_thread(tmp_path, monkeypatch):
    path = tmp_path / ckpt.RESUME_FILE
    path.write_bytes(TORCH_SAVED.read_bytes())
    names = _loads_by_thread(monkeypatch)
    early = ckpt.Prefetch.start(path)
    assert early is not None
    assert early.take() == (True, {"unpickled": 1}) and names == ["MainThread"]
    _fake_torch(monkeypatch)  # too late: the thread has ended and unpickles nothing more
    assert names == ["MainThread"] and not early._thread.is_alive()
