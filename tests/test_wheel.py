"""The wheel carries everything roach reads at run time: build it, install it in a fresh venv, use it there.

Takes about 10 s (build isolation and the venv fetch setuptools, click and rich from the package index).
Run from a temporary directory so that the source tree is not on ``sys.path``: every import and data file
must come from the venv's site-packages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import roach
from roach.lab.config import LabConfig

REPO = Path(__file__).resolve().parent.parent
LAB_STATE = Path(os.environ.get("ROACH_LAB_DIR") or "/var/lib/roach/lab")  # the lab the suite runs on
ALWAYS = [
    "py.typed",
    "slurm/README.md",
    "lab/templates/slurm.conf",
    "lab/templates/gres.conf",
    "lab/templates/slurmdbd.conf",
    "lab/templates/my.cnf",
]
# Source-tree clutter that must not go into the copy the wheel is built from.
SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "bench")


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with no PYTHONPATH, so nothing but the venv's own site-packages can be imported."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, f"{argv} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _package_data_in_source() -> list[str]:
    """Every file the pyproject's package-data globs match in the source tree, relative to roach/."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    found = set(ALWAYS)
    for package, globs in config["tool"]["setuptools"]["package-data"].items():
        folder = REPO.joinpath(*package.split("."))
        for pattern in globs:
            found |= {str(p.relative_to(REPO / "roach")) for p in folder.glob(pattern) if p.is_file()}
    return sorted(found)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(venv, site-packages) of a fresh venv with only the built wheel and its dependencies."""
    tmp = tmp_path_factory.mktemp("wheel")
    src, dist, venv = tmp / "src", tmp / "dist", tmp / "venv"
    shutil.copytree(REPO, src, ignore=SKIP)
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(src)], cwd=tmp)
    wheels = list(dist.glob("roach-*.whl"))
    assert len(wheels) == 1, wheels
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp)  # no --system-site-packages
    _run([str(venv / "bin" / "pip"), "install", str(wheels[0])], cwd=tmp)  # click and rich from the index
    site = _run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=tmp
    ).stdout.strip()
    return venv, Path(site)


@pytest.mark.slow
def test_installed_package_is_the_wheel_not_the_source(installed):
    venv, site = installed
    r = _run(
        [str(venv / "bin" / "python"), "-c", "import roach, sys; print(roach.__file__); print(sys.prefix)"],
        cwd=venv.parent,
    )
    location, prefix = r.stdout.split()
    assert Path(location).is_relative_to(site), location
    assert Path(prefix) == venv
    assert not Path(location).is_relative_to(REPO)


def test_package_data_is_inside_the_installed_package(installed):
    venv, site = installed
    expected = _package_data_in_source()
    if (REPO / "roach" / "runtime" / "node.sh").exists():
        assert "runtime/node.sh" in expected
    code = (
        "import json, sys; from importlib import resources; root = resources.files('roach'); "
        "print(json.dumps({p: str(root.joinpath(p)) for p in sys.argv[1:] if root.joinpath(p).is_file()}))"
    )
    r = _run([str(venv / "bin" / "python"), "-c", code, *expected], cwd=venv.parent)
    found = json.loads(r.stdout)
    assert sorted(found) == expected, f"missing from the wheel: {sorted(set(expected) - set(found))}"
    for path in found.values():
        assert Path(path).is_relative_to(site / "roach"), path
    template = (site / "roach" / "lab" / "templates" / "slurm.conf").read_text()
    assert template == (REPO / "roach" / "lab" / "templates" / "slurm.conf").read_text()


def test_installed_roach_command_runs(installed):
    venv, _ = installed
    r = _run([str(venv / "bin" / "roach"), "--version"], cwd=venv.parent)
    assert r.stdout.strip() == f"roach {roach.__version__}"


def test_installed_roach_prints_the_lab_env(installed):
    if not (LAB_STATE / "lab.json").is_file():
        pytest.skip(f"no lab state in {LAB_STATE} (start one with `roach lab up` as root)")
    venv, _ = installed
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "ROACH_LAB_DIR")}
    r = _run([str(venv / "bin" / "roach"), "lab", "env", "--state-dir", str(LAB_STATE)], cwd=venv.parent, env=env)
    assert f"export SLURM_CONF={LabConfig.load(LAB_STATE).slurm_conf}" in r.stdout.splitlines()


def test_installed_roach_prints_the_skill_and_asks_for_the_mcp_extra(installed):
    """The skill's template rides in the wheel; `roach mcp` without the `mcp` extra says how to get it."""
    venv, _ = installed
    roach_bin = str(venv / "bin" / "roach")
    assert "mcp" in _run([roach_bin, "-h"], cwd=venv.parent).stdout  # help lists it without importing mcp
    skill = _run([roach_bin, "skill"], cwd=venv.parent).stdout
    assert skill.startswith("---\nname: roach\n") and "### `roach submit [OPTIONS] TARGET`" in skill
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    r = subprocess.run(
        [roach_bin, "mcp"], cwd=venv.parent, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert r.returncode == 7 and "pip install 'roach[mcp]'" in r.stderr, (r.returncode, r.stderr)
