"""Scenario 6: SIGKILL at 50 random points during a checkpoint write; the previous resume.pt always loads.

A real torch.save (the lab's job venv, where torch is) of a state big enough that a save takes a while, by a
process forked for each kill and killed at a random moment in its save loop."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

KILLS = 50

WRITER = r"""
import os, random, signal, sys, time
from pathlib import Path
from roach.runtime import checkpoint as ckpt

path, kills = Path(sys.argv[1]), int(sys.argv[2])
rng = random.Random(16)
blob = os.urandom(4 * 1024 * 1024)
ckpt.save(path, {"roach": {"next_step": 0}, "state": {"n": 0, "blob": blob}})
t0 = time.monotonic(); ckpt.save(path, {"roach": {"next_step": 0}, "state": {"n": 0, "blob": blob}})
save_s = time.monotonic() - t0
last = 0
for k in range(kills):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the writer: saves n = last+1, last+2, ... until killed
        os.close(r)
        n = last
        while True:
            n += 1
            ckpt.save(path, {"roach": {"next_step": n}, "state": {"n": n, "blob": blob}})
            os.write(w, b".")
    os.close(w)
    time.sleep(rng.uniform(0, 3 * save_s))  # anywhere in the first saves, mid-write most of the time
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    saved = len(os.read(r, 1 << 20))  # saves that returned before the kill
    os.close(r)
    obj = ckpt.load(path)  # must load, whatever the kill interrupted
    n = obj["state"]["n"]
    assert obj["roach"]["next_step"] == n and obj["state"]["blob"] == blob, k
    assert n >= last + saved, (k, n, last, saved)  # every save that returned is there (renamed before it returned)
    last = n
stale = len(ckpt.stale_temporaries(path.parent))
print(f"ok kills={kills} last={last} save_s={save_s:.3f} stale_temporaries={stale}")
"""


@pytest.mark.lab
def test_sigkill_during_checkpoint_writes_never_breaks_resume_pt(lab, tmp_path):
    python = Path(lab.state_dir) / "pyenv" / "bin" / "python"
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [str(python), "-c", WRITER, str(tmp_path / "resume.pt"), str(KILLS)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith(f"ok kills={KILLS}"), r.stdout
    stale = int(r.stdout.split("stale_temporaries=")[1])
    assert stale > 0, "no kill landed inside a save: the test did not test it"
