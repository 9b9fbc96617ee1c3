"""The packages lab tests commit to their repository: the submit tests' (tests/test_submit.py,
tests/test_master_port.py) and the sweeps' (tests/test_sweep_workflow.py, tests/test_crowd.py)."""

# pkg.dist:allreduce is a 4-rank gloo all_reduce; the rest are what submit's tests run.
PKG = {
    "pkg/__init__.py": "",
    "pkg/dist.py": """
import json, os, socket, sys

def allreduce(run):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.tensor([float(run.rank + 1)])
    dist.all_reduce(t)
    info = {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES")}
    info.update(node=run.node, sum=t.item(), hostname=socket.gethostname(), master_addr=os.environ["MASTER_ADDR"])
    info.update(python=sys.prefix, python_inode=os.stat(sys.prefix).st_ino)
    (run.run_dir / f"rank{run.rank}.json").write_text(json.dumps(info))
    run.log("all_reduce gave %s", t.item())
    dist.destroy_process_group()
    return t.item()
""",
    "pkg/jobs.py": """
import os, time

def hello(run, who="world"):
    run.log("hello %s from %s", who, run.node)
    return {"who": who, "rank": run.rank}

def boom(run):
    if run.rank == 1:
        raise ValueError("rank 1 exploded on purpose")
    time.sleep(300)  # the others would hang without roach stopping them

def uses_secret(run):
    value = os.environ.get("API_TOKEN", "")
    run.log("token present: %s (%d chars)", bool(value), len(value))
    return len(value)

def try_write_clone(run):
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        open(os.path.join(here, "scribble.txt"), "w").write("x")
    except OSError as exc:
        return "refused: " + type(exc).__name__
    return "wrote into the clone"
""",
}


# A checkpointing run of ``steps`` paced steps, a checkpoint every 5 and whenever asked: the sweeps' function.
SWEEP_TRAIN = """
import time

def train(run, steps=10, step_s=0.5):
    state = run.resume(default={"x": 0})
    for step in run.steps(run.start_step, steps):
        state["x"] += 1
        time.sleep(step_s)
        if run.should_checkpoint() or (step + 1) % 5 == 0:
            run.checkpoint(state)
    return state["x"]
"""
SWEEP_PKG = {"pkg/__init__.py": "", "pkg/train.py": SWEEP_TRAIN}
