"""The lab cluster: a real single-host Slurm for demos and tests (`roach lab up`)."""

from roach.lab.config import LabConfig, PreemptSignalSetting, default_state_dir
from roach.lab.lab import LabStatus, down, env_lines, status, up

__all__ = ["LabConfig", "LabStatus", "PreemptSignalSetting", "default_state_dir", "down", "env_lines", "status", "up"]
