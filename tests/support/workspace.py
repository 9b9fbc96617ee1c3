"""The NeuriCo workspace file as its runtime writes it, for the workspace tests."""

from __future__ import annotations

import json
from pathlib import Path

from roach.workspace.file import WORKSPACE_FILE


def runtime_file(workspace: Path, **override) -> dict:
    """The file exactly as the runtime writes it (2-space indent, trailing newline), keys overridable."""
    name = workspace.name
    info = {
        "backend": "dsi-slurm",
        "ssh_host": "login.ds",
        "workspace_name": name,
        "remote_root": f"$HOME/neurico_workspaces/{name}",
        "rsync_remote_root": f"login.ds:~/neurico_workspaces/{name}/",
        **override,
    }
    f = workspace / WORKSPACE_FILE
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(info, indent=2) + "\n")
    return info
