"""The lab cluster: a real single-host Slurm for demos and tests (`roach lab up`)."""

from roach.lab.config import LabConfig, PreemptSignalSetting, default_state_dir
from roach.lab.lab import down, up
from roach.lab.status import LabStatus, env_lines, status

__all__ = ["LabConfig", "LabStatus", "PreemptSignalSetting", "default_state_dir", "down", "env_lines", "status", "up"]
