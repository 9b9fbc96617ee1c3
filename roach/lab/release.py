"""The installed Slurm's release, for the few lab settings that are spelled differently across releases."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True, order=True)
class Release:
    major: int
    minor: int
    patch: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.patch}"

    @classmethod
    def parse(cls, text: str) -> Release | None:
        """``slurm-wlm 22.05.8``, ``slurm 24.11.5``, ``slurm 26.05.0-0rc1`` -> the release; None if none is named."""
        m = re.search(r"\b(\d{2})\.(\d{2})(?:\.(\d+))?", text)
        return cls(int(m[1]), int(m[2]), int(m[3] or 0)) if m else None

    @property
    def has_preempt_send_user_signal_in_preempt_parameters(self) -> bool:
        """23.02 moved the setting to ``PreemptParameters=send_user_signal`` (the old one stays, hidden)."""
        return self >= Release(23, 2)

    @property
    def knows_cgroup_plugin_disabled(self) -> bool:
        """``CgroupPlugin=disabled`` in cgroup.conf: 22.05's slurmd refuses it (no such plugin); 24.11 and
        26.05 take it (the releases between were not tried, so they get the default, as 22.05 does)."""
        return self >= Release(24, 11)

    @property
    def slurmrestd_takes_group(self) -> bool:
        """``slurmrestd -g GID``: 22.05 has no -g (it keeps root's group, which it allows); 24.11 and 26.05 take it
        and refuse to run in root's group (the releases between were not tried)."""
        return self >= Release(24, 11)


@cache
def installed() -> Release | None:
    """The release of the installed slurmctld (``slurmctld -V``); None where it cannot be told."""
    exe = shutil.which("slurmctld", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if exe is None:
        return None
    try:
        r = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return Release.parse(r.stdout + r.stderr)
