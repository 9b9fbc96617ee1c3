"""ClusterFS on this machine as this user writes in its own process, what its ``sh`` programs write elsewhere.

The same calls run twice: through a transport that is not this machine's own user (the ``sh -c`` programs, as over
SSH or ``runuser``) and through ``LocalTransport()`` with every command refused; the trees they leave must be the
same, file for file, mode for mode.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from roach.errors import RoachError
from roach.scheduler.clusterfs import ClusterFS
from roach.scheduler.transport import LocalTransport


class ViaSh(LocalTransport):
    """This machine, but as if it were another host: every write is one of ClusterFS's ``sh`` programs."""


def _tree(root: Path) -> dict[str, tuple[str, int, bytes]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
            out[str(p.relative_to(root))] = (kind, stat.S_IMODE(st.st_mode), b"" if kind == "dir" else p.read_bytes())
    return out


def _runtime(tmp: Path) -> tuple[list[Path], Path]:
    base = tmp / "pkgsrc"
    (base / "pkg" / "sub").mkdir(parents=True)
    (base / "pkg" / "__init__.py").write_text("x = 1\n")
    (base / "pkg" / "sub" / "run.sh").write_text("echo hi\n")
    os.chmod(base / "pkg" / "sub" / "run.sh", 0o755)
    return sorted(p for p in base.rglob("*") if p.is_file()), base


def _scenario(fs: ClusterFS, root: Path, runtime: list[Path], base: Path) -> None:
    logs = root / "logs"
    bundles = logs / "bundles"
    fs.write_many({f"{bundles}/7_{i}/job.json": f'{{"i": {i}}}\n' for i in range(5)} | {f"{bundles}/7/job.sh": "#!"})
    # again into the same directories: a file replaced, a new file beside them, a new directory
    fs.write_many({f"{bundles}/7_1/job.json": "replaced\n", f"{bundles}/7_1/extra": "e", f"{bundles}/8/job.sh": "8"})
    rt = f"{bundles}/roach-abc"
    fs.write_bundle({f"{bundles}/9/job.sh": "s", f"{bundles}/9/spec.json": "{}"}, runtime, base, rt)
    Path(rt, "kept").write_text("a complete copy is never replaced")
    fs.write_bundle({f"{bundles}/10/job.sh": "t"}, runtime, base, rt)
    fs.ship(runtime, base, f"{root}/shipped/roach-def")
    fs.ship(runtime[:1], base, f"{root}/shipped/roach-def")  # complete: kept as it is
    fs.write(f"{root}/a/b/c.sh", "#!/bin/sh\n", mode="755")
    fs.write(f"{root}/a/b/c.sh", "#!/bin/sh\nexit 0\n", mode="755")
    fs.write(f"{root}/a/d.txt", "d")
    fs.makedirs(f"{root}/made/here")
    assert fs.exists(f"{root}/a/d.txt") and not fs.exists(f"{root}/a/nothing")


def test_writes_here_leave_the_tree_the_sh_programs_leave_without_running_a_command(tmp_path, monkeypatch):
    runtime, base = _runtime(tmp_path)
    (tmp_path / "sh").mkdir()
    (tmp_path / "here").mkdir()
    _scenario(ClusterFS(ViaSh()), tmp_path / "sh", runtime, base)

    def refused(self, argv, **kw):
        raise AssertionError(f"ran {argv[:3]}: this machine's own files need no command")

    monkeypatch.setattr(LocalTransport, "run", refused)
    fs = ClusterFS(LocalTransport())
    _scenario(fs, tmp_path / "here", runtime, base)
    assert _tree(tmp_path / "here") == _tree(tmp_path / "sh")
    assert fs.home() == (os.environ.get("HOME", "").strip() or "/")
    assert ClusterFS(LocalTransport(env={"HOME": "/somewhere/else"})).expand("~/x") == "/somewhere/else/x"


def test_a_write_here_that_fails_is_worded_as_the_programs_failure(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    for fs in (ClusterFS(ViaSh()), ClusterFS(LocalTransport())):
        with pytest.raises(RoachError, match=f"on the cluster, writing 1 files under {tmp_path}/file/x failed"):
            fs.write_many({f"{tmp_path}/file/x/job.json": "{}"})
        with pytest.raises(RoachError, match=f"on the cluster, writing the bundle {tmp_path}/file/b failed"):
            fs.write_bundle({f"{tmp_path}/file/b/job.sh": "s"}, [], tmp_path, f"{tmp_path}/rt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    # here, a call that fails halfway leaves none of the directories it made (a sweep's roll-back removes the rest)
    root = tmp_path / "root"
    root.mkdir()
    (root / "taken").write_text("a file where a bundle directory would go")
    files = {f"{root}/new-{i}/job.json": "{}" for i in range(3)} | {f"{root}/taken/job.json": "{}"}
    with pytest.raises(RoachError, match="failed"):
        ClusterFS(LocalTransport()).write_many(files)
    assert sorted(p.name for p in root.iterdir()) == ["taken"]
