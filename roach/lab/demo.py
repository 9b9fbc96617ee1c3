"""`make demo` / `roach lab demo`: submit a plain batch job to the lab and show it run.

Until roach's own job features land, this shows the lab and the Slurm client layer: a two-node job
with two fake GPUs per node, submitted as the lab's unprivileged user, watched with one squeue per
round, its final state read from sacct, and its output printed.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from roach.lab.config import LAB_USER, LabConfig
from roach.slurm.slurmcli import SlurmClient
from roach.slurm.transport import LocalTransport

SCRIPT = """#!/bin/bash
echo "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST as $(id -un)"
srun bash -c 'echo "  rank $SLURM_PROCID on $SLURMD_NODENAME, GPUs $CUDA_VISIBLE_DEVICES"; sleep 3'
"""


def main(state_dir: str | None = None, say=print) -> int:
    cfg = LabConfig.load(state_dir)
    client = SlurmClient(LocalTransport(env=cfg.env(), user=LAB_USER if os.geteuid() == 0 else None))
    out_dir = Path(tempfile.mkdtemp(prefix="roach-demo-"))
    os.chmod(out_dir, 0o777)
    out = out_dir / "demo-%j.out"
    job = client.sbatch(["--job-name=roach-demo", "--nodes=2", "--ntasks-per-node=2", "--gres=gpu:2",
                         "--time=5", f"--output={out}"], SCRIPT)
    say(f"submitted job {job} (2 nodes x 2 GPUs) as {LAB_USER if os.geteuid() == 0 else 'you'}")
    last = None
    while True:
        recs = [r for r in client.squeue(job_ids=[job]) if r.raw_id == job]
        state = (recs[0].state.value, recs[0].reason_text) if recs else None
        if state != last and state is not None:
            say(f"  squeue: {state[0]}" + (f" ({state[1]})" if state[1] not in ("None", "") else ""))
            last = state
        final = [r for r in client.sacct([job]) if r.step is None and r.state.is_terminal]
        if final:
            break
        time.sleep(1)
    rec = final[0]
    say(f"  sacct: {rec.state.value}, exit code {rec.exit_code}:{rec.exit_signal}, "
        f"{rec.nodes} nodes ({rec.nodelist}), {rec.tres.gpus} GPUs, {rec.elapsed_s}s")
    say(f"output ({str(out).replace('%j', str(job))}):")
    say(Path(str(out).replace("%j", str(job))).read_text().rstrip())
    return 0 if rec.exit_code == 0 and rec.state.is_success else 1
