"""``resume.pt``: written atomically, read back; never deleted by roach.

With torch importable the file is a ``torch.save`` of ``{"roach": {...}, "state": <user state>}``,
else a pickle of the same. A kill during a save leaves the previous file intact: the new one is
written to a temporary file in the same directory, fsynced, then renamed over it.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from roach._fs import atomic_open

RESUME_FILE = "resume.pt"


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def save(path: Path, obj: Any) -> None:
    with atomic_open(path) as f:
        torch = _torch()
        if torch is not None:
            torch.save(obj, f)
        else:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)


def load(path: Path) -> Any:
    torch = _torch()
    if torch is not None:
        return torch.load(path, map_location="cpu", weights_only=False)
    with open(path, "rb") as f:
        return pickle.load(f)


def stale_temporaries(directory: Path) -> list[Path]:
    """Partial saves left by a killed writer (never the checkpoint itself)."""
    return sorted(directory.glob(f".{RESUME_FILE}.*.tmp"))
