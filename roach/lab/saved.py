"""Where a lab lives and the ``lab.json`` its `roach lab up` saved, read without building its settings.

A client of the lab (its site module, so every ``roach ls`` on it) needs only the environment that points Slurm's
commands at the lab's ``slurm.conf``; :class:`~roach.lab.config.LabConfig` and its twenty-odd fields are for the
commands that run the lab. Both read ``lab.json`` here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from roach.errors import LabError


def default_state_dir() -> Path:
    """Where the lab keeps everything unless told otherwise.

    ``$ROACH_LAB_DIR`` wins. The lab runs as root (it starts daemons), and root's home is closed to the
    lab's unprivileged user, whose jobs must read ``slurm.conf``: so root's default is ``/var/lib``,
    where daemons keep state; anyone else's is their XDG data dir.
    """
    env = os.environ.get("ROACH_LAB_DIR")
    if env:
        return Path(env).expanduser().absolute()
    if os.geteuid() == 0:
        return Path("/var/lib/roach/lab")
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "roach" / "lab"


def _state(state_dir: str | os.PathLike[str] | None) -> Path:
    return Path(state_dir) if state_dir else default_state_dir()


def read_saved(state_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The ``lab.json`` in ``state_dir`` (default: :func:`default_state_dir`), as saved."""
    state = _state(state_dir)
    try:
        return json.loads((state / "lab.json").read_text())
    except FileNotFoundError:
        raise LabError(
            f"no lab in {state} (no lab.json)",
            hint="start it with `roach lab up` (as root), or point ROACH_LAB_DIR at its state directory",
        ) from None


def etc_dir(state: Path) -> Path:
    """The lab's configuration files (slurm.conf and the rest) under its state directory ``state``."""
    return state / "etc"


def slurm_conf_path(state: Path) -> Path:
    """The ``slurm.conf`` of the lab whose state directory is ``state``."""
    return etc_dir(state) / "slurm.conf"


def slurm_env(state: Path) -> dict[str, str]:
    """The environment a shell or a transport needs to use the Slurm of the lab whose state is ``state``."""
    return {"SLURM_CONF": str(slurm_conf_path(state))}


def saved_slurm_env(state_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """:func:`slurm_env` of the lab saved in ``state_dir``: the state directory its ``lab.json`` names."""
    saved = read_saved(state_dir)
    if not isinstance(saved.get("state_dir"), str):
        raise LabError(
            f"{_state(state_dir) / 'lab.json'} names no state_dir", hint="start the lab again with `roach lab up`"
        )
    return slurm_env(Path(saved["state_dir"]))
