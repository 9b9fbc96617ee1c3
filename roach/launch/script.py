"""The batch script of a roach job: Slurm options, the site file, the node step, the ranks' step.

Every value that reaches the shell is quoted here with ``shlex.quote``; the script carries no secret
(secrets are read from ``secrets_dir`` by each rank on its node).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from roach.fleet.cluster import Cluster
from roach.model.python_env import PythonEnv
from roach.model.resources import Resources


@dataclass(frozen=True)
class ArrayPart:
    """One Slurm job array of a sweep: its tasks 0..count-1 are the sweep's runs offset..offset+count-1."""

    sweep_id: str
    count: int
    offset: int
    parallelism: int | None  # at most this many of its tasks run at once (--array=...%K)
    run_root: str  # each task's run directory is <run_root>/<sweep_id>-<offset + task>
    after: int | None = None  # the array before it, when parts must not run side by side (parallelism)

    def run_id(self, task: int) -> str:
        return sweep_run_id(self.sweep_id, self.offset + task)


def sweep_run_id(sweep_id: str, index: int) -> str:
    """The run id of run ``index`` of a sweep (the same in Python and in the batch script)."""
    return f"{sweep_id}-{index}"


def sweep_log(log_root: str, sweep_id: str, array_id: int | str, task: int | str) -> str:
    """The log of task ``task`` of a sweep's array (``%A``, ``%a``: the pattern Slurm fills in)."""
    return f"{log_root}/{sweep_id}_{array_id}_{task}.out"


@dataclass(frozen=True)
class ScriptInputs:
    cluster: Cluster
    resources: Resources
    name: str
    run_id: str
    log_root: str  # absolute, on the cluster
    bundle_root: str  # absolute: <log_root>/bundles
    roach_path: str  # absolute: where roach was shipped
    repo_url: str
    repo_name: str
    commit: str
    clone_root: str  # may start with ~ (expanded on the node)
    run_dir: str  # may start with ~ (unused for an array: each task has its own)
    array: ArrayPart | None = None
    python_env: PythonEnv | None = None  # None: the site file's ROACH_ENV


def render(i: ScriptInputs) -> str:
    q = shlex.quote
    # append: a requeued job keeps its id and its log, and Slurm would truncate the log otherwise.
    # No "B:" in --signal: the ranks get the signal directly, the batch shell does not.
    a = i.array
    log = sweep_log(i.log_root, a.sweep_id, "%A", "%a") if a else f"{i.log_root}/{i.run_id}_%j.out"
    opts = [
        f"--job-name={i.name}",
        f"--output={log}",
        "--open-mode=append",
        "--requeue",
        f"--signal={i.cluster.checkpoint_signal}@{i.cluster.signal_lead_s}",
        *i.resources.sbatch_options(i.cluster.gpu_flag),
    ]
    if a:
        opts.append(f"--array=0-{a.count - 1}" + (f"%{a.parallelism}" if a.parallelism else ""))
        if a.after is not None:
            opts.append(f"--dependency=afterany:{a.after}")
    header = "\n".join(f"#SBATCH {o}" for o in opts)
    exports = {
        "ROACH_REPO_URL": i.repo_url,
        "ROACH_REPO_NAME": i.repo_name,
        "ROACH_COMMIT": i.commit,
        "ROACH_CLONE_ROOT": i.clone_root,
        "ROACH_ROACH_PATH": i.roach_path,
    }
    if not a:
        exports |= {"ROACH_RUN_ID": i.run_id, "ROACH_RUN_DIR": i.run_dir}
    export_lines = "\n".join(f"export {k}={q(v)}" for k, v in exports.items())
    if a:  # one script for every task: the task's run id and directory come from its index
        export_lines += (
            f"\nexport ROACH_RUN_ID={q(a.sweep_id)}-$(( SLURM_ARRAY_TASK_ID + {a.offset} ))"
            f'\nexport ROACH_RUN_DIR={q(a.run_root.rstrip("/") or "/")}/"$ROACH_RUN_ID"'
        )
        bundle = f'{q(i.bundle_root)}/"$SLURM_ARRAY_JOB_ID"'
    else:
        bundle = f'{q(i.bundle_root)}/"$SLURM_JOB_ID"'
    return f"""#!/bin/bash
{header}
# roach job {i.run_id}: {i.commit[:12]} of {i.repo_name}. What a job does: roach/slurm/README.md.
set -euo pipefail
{export_lines}
export ROACH_BUNDLE={bundle}

# --- site file of cluster {i.cluster.name} ---
{i.cluster.site_file().rstrip()}
# --- end of site file ---
export ROACH_ENV={q(i.python_env or i.cluster.site_python_env())}  # how the job's Python is made (node.sh)

# One node: only node.sh's first functions (--hot: bash stops reading it there); several: all of them.
if [ "$SLURM_JOB_NUM_NODES" -eq 1 ]; then source "$ROACH_BUNDLE/node.sh" --hot; else source "$ROACH_BUNDLE/node.sh"; fi
roach_expand_to run_dir "$ROACH_RUN_DIR"
roach_utc_now started_at
echo "roach: attempt $(( ${{SLURM_RESTART_COUNT:-0}} + 1 )) of run $ROACH_RUN_ID: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST (restart count ${{SLURM_RESTART_COUNT:-0}}) at $started_at"
# Preemption signals every process of the job: the batch shell must outlive the ranks' checkpoint.
trap 'echo "roach: batch script caught SIGTERM; the ranks checkpoint and leave"' TERM
trap 'echo "roach: batch script caught SIG{i.cluster.checkpoint_signal}"' {i.cluster.checkpoint_signal}
# The first node's address, read before the ranks start: where the allocation is this one node, every rank runs
# here and rendezvous on loopback (no question to slurmctld); else the first node's NodeAddr, asked of slurmctld
# in the background while the node prepares.
roach_addr=""
[ "$SLURM_JOB_NUM_NODES" -eq 1 ] || exec {{roach_addr}}< <(roach_master_addr)
roach_clone_dir_to clone
if [ "$SLURM_JOB_NUM_NODES" -eq 1 ]; then  # the one node is this one, where the batch script runs: no job step,
  # and nothing at all but a line where the clone is ready (what prepare looks at first); else prepare in its own bash, as
  # srun's task would run it (the same environment)
  roach_ready_to ready "$clone"
  if [ -e "$ready" ]; then roach_env_reused "$clone"; else bash "$ROACH_BUNDLE/node.sh" prepare || roach_prepare_failed $?; fi
else  # a prepare that fails ends the job here: exit 7 where the environment could not be built (env_failed)
  srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 \\
    bash "$ROACH_BUNDLE/node.sh" prepare || roach_prepare_failed $?
fi
export ROACH_CLONE_DIR="$clone"
roach_python_to py "$clone"
if [ "$SLURM_JOB_NUM_NODES" -eq 1 ]; then  # every rank runs here: rank 0 picks a free port as it starts and tells
  # the others (roach/runtime/rendezvous.py), so the ranks start now, with no look at this node's TCP tables first
  export MASTER_ADDR=127.0.0.1 ROACH_PORT_BY_RANK0=1
  unset MASTER_PORT
else
  # The batch script runs on the allocation's first node, where rank 0 listens: a port free here, found while
  # slurmctld answers (and not rank 0's to pick, whatever the submitter's env said).
  unset ROACH_PORT_BY_RANK0
  exec {{roach_port}}< <(roach_free_port "$py" $(( 20000 + SLURM_JOB_ID % 20000 )))
  rc=1 first="" MASTER_ADDR="" MASTER_PORT=""
  read -r rc first MASTER_ADDR <&"$roach_addr" || :
  exec {{roach_addr}}<&-
  [ "$rc" = 0 ] || exit "$rc"
  export MASTER_ADDR="${{MASTER_ADDR:-$first}}"
  read -r MASTER_PORT <&"$roach_port" || :
  exec {{roach_port}}<&-
  export MASTER_PORT
  echo "roach: rendezvous at $MASTER_ADDR:$MASTER_PORT (a port free on $first when this attempt started)"
fi
export PYTHONPATH="$ROACH_ROACH_PATH:$clone${{PYTHONPATH:+:$PYTHONPATH}}"
roach_block_signals {i.cluster.checkpoint_signal}
# The ranks start in the shipped runtime (the first entry of PYTHONPATH, which Python puts before it as the working
# directory of `-m`), then make the run directory and work in it (roach/runtime/rank.py): no mkdir here first.
cd "$ROACH_ROACH_PATH"
srun --kill-on-bad-exit=1 --wait={i.cluster.rank_exit_wait_s} --label ${{ROACH_BLOCK[@]+"${{ROACH_BLOCK[@]}}"}} \
  "$py" -m roach.slurm.run "$ROACH_BUNDLE/spec.json" &
ranks=$!
while kill -0 "$ranks" 2>/dev/null; do wait "$ranks" || true; done
wait "$ranks" && rc=0 || rc=$?
if [ -e "$run_dir/.roach/left.$SLURM_JOB_ID.${{SLURM_RESTART_COUNT:-0}}" ]; then
  echo "roach: the ranks left to come back (exit code $rc); ending this attempt cleanly"
  exit 0
fi
[ "$rc" -eq 0 ] || echo "roach: the ranks' step ended with exit code $rc"
exit "$rc"
"""
