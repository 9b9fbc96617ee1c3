"""The Python the lab's jobs run: a venv made from roach's own Python where the lab's user may run it, else from a copy of it in the state folder (Debian 13, whose system Python is another version), else from the system's."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

from roach.errors import LabError
from roach.lab.config import LAB_USER, LabConfig

# The tools a job's environment is built with (a uv project's `uv sync`): from PyPI into the job venv, and linked
# alone into <state>/tools, which lab.sh puts on the jobs' PATH (the job venv's python stays off it).
TOOLS = ("uv",)
TOOLS_DIR = "tools"
NODE_VENV = ".local/share/roach-lab/python"  # a node's own venv, in its home (node-local homes; site file lab.sh)


def link_job_venv(state: Path, source: Path) -> None:
    """A lab's job venv linked to the one of the lab in ``source`` (torch installed once), where that one has a
    python and the lab in ``state`` has no venv yet; ``state`` made where missing, readable by the lab user."""
    link, venv = state / "pyenv", source / "pyenv"
    if not (venv / "bin" / "python").exists() or link.exists() or link.is_symlink():
        return
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o755)
    link.symlink_to(venv)


def ensure_job_venv(cfg: LabConfig, packages: tuple[str, ...] = ()) -> None:
    """The venv the lab's jobs run in (site file lab.sh): the system python, readable by the lab user; and the
    tools a job's own environment is built with (:data:`TOOLS`), on the jobs' PATH from ``<state>/tools``."""
    venv = cfg.state / "pyenv"
    if not (venv / "bin" / "python").exists():
        make_venv(venv)
    missing = tuple(t for t in TOOLS if not (venv / "bin" / t).exists())
    if packages or missing:
        r = subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", *packages, *missing], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise LabError(
                f"could not install {' '.join((*packages, *missing))} into the lab's job venv {venv}:\n"
                f"{r.stderr[-2000:]}",
                hint="check the package names and that pip can reach its index",
            )
    tools = cfg.state / TOOLS_DIR
    tools.mkdir(exist_ok=True)
    tools.chmod(0o755)
    for t in TOOLS:
        link = tools / t
        if not link.is_symlink():
            link.unlink(missing_ok=True)
            link.symlink_to(venv / "bin" / t)


def ensure_node_venvs(cfg: LabConfig) -> None:
    """With node-local homes, a venv of each node's own in its home, as a site's node has its own environment;
    its packages are the job venv's (a .pth), so what the lab installs once every node imports."""
    if not cfg.node_homes:
        return
    shared = cfg.state / "pyenv" / "bin" / "python"
    user, packages = pwd.getpwnam(LAB_USER), _purelib(shared)
    for n in cfg.node_names:
        venv = cfg.node_home(n) / NODE_VENV
        if not (venv / "bin" / "python").exists():
            shutil.rmtree(venv, ignore_errors=True)  # a venv half made by a killed `lab up`
            r = subprocess.run([str(shared), "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True)
            if r.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                raise LabError(f"could not make {n}'s venv {venv}: {r.stderr.strip()}", hint="read the error above")
        pth = Path(_purelib(venv / "bin" / "python")) / "roach-lab-packages.pth"
        pth.write_text(f"import site; site.addsitedir({packages!r})\n")
        subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(cfg.node_home(n) / ".local")], check=True)


def _purelib(python: Path) -> str:
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def job_python(state: Path | None = None) -> str:
    """The Python the jobs' venv is made from: the one roach runs on, where the lab's user may run it; else,
    where the system's is another version, a copy of roach's in the lab's state folder that the lab's user
    may run (root's pyenv is closed to it); else the system's. So the jobs run roach's Python where they can: on Debian 13 the system's is 3.13, for which the
    job packages (torch==2.13.0 for 3.11 on this kind's disk) may not exist.
    """
    system = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    own = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    if own == os.path.realpath(system):
        return system
    if lab_user_runs(own):
        return own
    if state is not None and minor_version(system) != sys.version_info[:2]:
        copy = runnable_copy(state / "python")
        if copy is not None:
            return copy
    return system


def minor_version(python: str) -> tuple[int, ...]:
    r = subprocess.run(
        [python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, timeout=60
    )
    return tuple(int(x) for x in r.stdout.split()) if r.returncode == 0 else ()


def lab_user_runs(python: str) -> bool:
    r = subprocess.run(["runuser", "-u", LAB_USER, "--", python, "-c", "import venv"], capture_output=True, timeout=60)
    return r.returncode == 0


def runnable_copy(dest: Path) -> str | None:
    """This Python copied to ``dest`` (:func:`copy_python`), where the lab's user may run it: the copy's
    python, reused when already there, or None where that cannot be made (no patchelf)."""
    exe = dest / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if exe.exists() and lab_user_runs(str(exe)):
        return str(exe)
    made = copy_python(dest)
    return made if made is not None and lab_user_runs(made) else None


def copy_python(dest: Path) -> str | None:
    """This Python's installation (no site-packages, no test suite) copied to ``dest``, open to all, its
    libpython found beside it (patchelf; a pyenv build names it by an absolute path): the copy's python, or
    None without patchelf. Also what ``make test-matrix`` puts into a Debian root for its lab's jobs."""
    exe_name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    patchelf = shutil.which("patchelf")
    if patchelf is None:
        return None
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(
        Path(sys.base_prefix),
        tmp,
        symlinks=True,
        ignore=lambda d, names: [
            n for n in names if (Path(d).name.startswith("python") and n in ("site-packages", "test"))
        ],
    )
    r = subprocess.run(
        [patchelf, "--set-rpath", "$ORIGIN/../lib", str(tmp / "bin" / exe_name)], capture_output=True, text=True
    )
    if r.returncode == 0:
        r = subprocess.run(["chmod", "-R", "go+rX", str(tmp)], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return str(dest / "bin" / exe_name)


def make_venv(venv: Path) -> None:
    python = job_python(venv.parent)
    r = subprocess.run([python, "-m", "venv", str(venv)], capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        raise LabError(
            f"could not make the lab's job venv {venv}: {r.stderr.strip() or r.stdout.strip()}",
            hint="install python3-venv: apt-get install -y python3-venv",
        )
