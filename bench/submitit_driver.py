"""Submits one job with submitit, as the bench user, and prints what the benchmark needs as JSON.

Run by the benchmark as ``runuser -u roachbench -- <lab python> -m bench.submitit_driver ...`` with
bench/out/pylib on PYTHONPATH: submitit's jobs run as the user who submits them, with the submitting
python (``sys.executable``) and environment, so this process is that user, on that python.

    latency --folder F --out PATH                 first_line(None, out=PATH); prints t0, t_ret, job_id
    train --folder F --progress P --steps N ...   TrainSubmitit()(N, step_s, P); prints t0, job_id
    map --folder F --n N                          map_array(first_line, N runs), held; prints wall, job ids
    ddp --folder F --progress P --ckpt C --mb M   DdpRestartSubmitit(C)(mb=M, ...) on 2 nodes x 2 tasks; prints job_id
    paced --folder F --grid G --qos Q --progress-dir D
                                                  map_array(PacedSubmitit(), the grid's runs), one GPU each at QOS Q
                                                  (a list, where the release takes one); prints the array's job id
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import submitit


def _executor(folder: str, timeout_min: int, **params):
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    ex.update_parameters(timeout_min=timeout_min, slurm_partition="gpu", cpus_per_task=1, **params)
    return ex


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.submitit_driver")
    sub = ap.add_subparsers(dest="cmd", required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--folder", required=True)
    lat.add_argument("--out", required=True)
    tr = sub.add_parser("train")
    tr.add_argument("--folder", required=True)
    tr.add_argument("--progress", required=True)
    tr.add_argument("--steps", type=int, default=60)
    tr.add_argument("--step-s", type=float, default=0.1)
    tr.add_argument("--node", required=True)
    tr.add_argument("--qos", default="low")
    tr.add_argument("--timeout-min", type=int, default=10)
    mp = sub.add_parser("map")
    mp.add_argument("--folder", required=True)
    mp.add_argument("--n", type=int, required=True)
    mp.add_argument("--out-dir", required=True)
    dd = sub.add_parser("ddp")
    dd.add_argument("--folder", required=True)
    dd.add_argument("--progress", required=True)
    dd.add_argument("--ckpt", required=True)
    dd.add_argument("--mb", type=int, default=100)
    dd.add_argument("--nodes", required=True, help="the two nodes, e.g. n1,n2")
    pc = sub.add_parser("paced")
    pc.add_argument("--folder", required=True)
    pc.add_argument("--grid", required=True, help="a JSON list of {steps, step_s}")
    pc.add_argument("--qos", required=True)
    pc.add_argument("--progress-dir", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "paced":
        return _paced(a)
    if a.cmd == "ddp":
        from bench.jobfns_submitit import DdpRestartSubmitit

        ex = submitit.AutoExecutor(folder=a.folder, cluster="slurm")
        ex.update_parameters(
            timeout_min=30,
            slurm_partition="gpu",
            nodes=2,
            tasks_per_node=2,
            cpus_per_task=1,
            slurm_gres="gpu:2",
            slurm_job_name="restart-submitit",
            slurm_additional_parameters={"nodelist": a.nodes},
        )
        job = ex.submit(DdpRestartSubmitit(a.ckpt), 100000, 0.05, a.mb, a.progress)
        print(json.dumps({"job_id": str(job.job_id)}))
        return 0
    if a.cmd == "map":
        from bench.jobfns import first_line

        ex = _executor(
            a.folder,
            5,
            slurm_job_name="sweep-submitit",
            slurm_array_parallelism=a.n,
            slurm_additional_parameters={"hold": True},
        )
        outs = [f"{a.out_dir}/submitit-{i}.t" for i in range(a.n)]
        t0 = time.perf_counter()
        jobs = ex.map_array(first_line, [None] * a.n, outs)
        wall = time.perf_counter() - t0
        print(json.dumps({"wall": wall, "job_ids": sorted({j.job_id.split("_")[0] for j in jobs})}))
        return 0
    if a.cmd == "latency":
        from bench.jobfns import first_line

        ex = _executor(a.folder, 5, slurm_job_name="lat-submitit")
        t0 = time.time()
        job = ex.submit(first_line, None, a.out)
        t_ret = time.time()
        print(json.dumps({"t0": t0, "t_ret": t_ret, "job_id": str(job.job_id)}))
        return 0
    from bench.jobfns_submitit import TrainSubmitit

    ex = _executor(
        a.folder,
        a.timeout_min,
        slurm_job_name="preempt-submitit",
        slurm_qos=a.qos,
        slurm_gres="gpu:1",
        slurm_additional_parameters={"nodelist": a.node},
    )
    t0 = time.time()
    job = ex.submit(TrainSubmitit(), a.steps, a.step_s, a.progress)
    print(json.dumps({"t0": t0, "job_id": str(job.job_id)}))
    return 0


def _paced(a: argparse.Namespace) -> int:
    from bench.jobfns_submitit import PacedSubmitit

    grid = json.loads(open(a.grid).read())
    ex = _executor(
        a.folder,
        60,
        slurm_job_name="crowd-submitit",
        slurm_qos=a.qos,
        slurm_gres="gpu:1",
        slurm_array_parallelism=len(grid),
    )
    progress = [f"{a.progress_dir}/{i}.steps" for i in range(len(grid))]
    jobs = ex.map_array(PacedSubmitit(), [g["steps"] for g in grid], [g["step_s"] for g in grid], progress)
    print(json.dumps({"job_ids": sorted({j.job_id.split("_")[0] for j in jobs})}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
