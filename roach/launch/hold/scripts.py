"""The scripts of holding: the holder's batch script, and an attempt's ``step.sh`` and ``driver.sh``.

The holder's script (:func:`render_holder`) sleeps; Slurm sends it ``USR1`` ``lead`` seconds before its wall
clock, and it then stops the running attempts' ranks the way :meth:`~roach.launch.hold.holder.Holder.signal`
does, so their last checkpoint is fresh. An attempt's ``step.sh`` is the nodes' side; its ``driver.sh`` the
submit host's, which runs the node step and then the ranks' step as steps of the holder.
:mod:`~roach.launch.hold.attempt_start` fills an :class:`AttemptInputs` and writes what these render into the
attempt's bundle. The guide is docs/hold.md.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from roach.fleet.cluster import Cluster
from roach.launch.hold.attempts import EXIT_LEFT, AttemptPaths
from roach.launch.hold.steps import SIGNAL_PROGRAM, STEP_NODE, STEP_RANKS, STEP_SIGNAL
from roach.model.python_env import PythonEnv
from roach.model.resources import Resources


# -- the holder --------------------------------------------------------------------------------------------
def render_holder(
    *, cluster: Cluster, resources: Resources, name: str, hold_id: str, log_root: str, lead_s: int
) -> str:
    """The holder's batch script: sleep; on ``USR1`` (``lead_s`` before the wall clock, up to Slurm's 30 s
    timer earlier) mark the holder as ending (so no attempt starts any more) and stop the attempts' ranks,
    then once more 10 s later for ranks that were starting at that moment."""
    sig = cluster.checkpoint_signal
    opts = [
        f"--job-name={name}",
        f"--output={log_root}/{hold_id}_%j.out",
        "--open-mode=append",
        "--no-requeue",
        f"--signal=B:USR1@{lead_s}",
        *resources.sbatch_options(cluster.gpu_flag),
    ]
    header = "\n".join(f"#SBATCH {o}" for o in opts)
    return f"""#!/bin/bash
{header}
# roach holder {hold_id}: takes the nodes and sleeps; submit(..., inside=<this job>) runs attempts as its
# steps. Slurm sends this shell USR1 {lead_s} s before the wall clock; it then sends the attempts' ranks
# SIG{sig} (checkpoint and leave). See docs/hold.md.
set -u
now() {{ date -u +%Y-%m-%dT%H:%M:%SZ; }}
bundle={shlex.quote(log_root + "/bundles")}/"$SLURM_JOB_ID"
roach_signal_program={shlex.quote(SIGNAL_PROGRAM)}
stop_attempts() {{
  srun --jobid="$SLURM_JOB_ID" --overlap --job-name={STEP_SIGNAL} --nodes="$SLURM_JOB_NUM_NODES" \\
    --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \\
    bash -c "$roach_signal_program" {STEP_SIGNAL} {sig} "$SLURM_JOB_ID" ""
}}
again_at=
near_end() {{
  now > "$bundle/ending"
  echo "roach: holder $SLURM_JOB_ID: its wall clock is {lead_s} s away ($(now)): \\
stopping the attempts' ranks (SIG{sig})"
  stop_attempts
  again_at=$((SECONDS + 10))
}}
trap near_end USR1
trap 'echo "roach: holder $SLURM_JOB_ID ends: SIGTERM at $(now)"; exit 0' TERM
echo "roach: holder $SLURM_JOB_ID holds $SLURM_JOB_NODELIST ($SLURM_JOB_NUM_NODES node(s)) from $(now); \\
attempts: submit(..., inside=$SLURM_JOB_ID); end it: roach release $SLURM_JOB_ID"
while true; do
  sleep 5 &
  wait $! || true
  kill $! 2>/dev/null || true
  if [ -n "$again_at" ] && [ "$SECONDS" -ge "$again_at" ]; then
    again_at=
    stop_attempts
  fi
done
"""


# -- an attempt -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttemptInputs:
    cluster: Cluster
    resources: Resources
    holder: int
    attempt: int
    run_id: str
    paths: AttemptPaths
    nodes: tuple[str, ...]  # the step's nodes, first = MASTER_ADDR
    gpus_per_node: int  # the holder's, per node
    roach_path: str
    repo_url: str
    repo_name: str
    commit: str
    clone_root: str
    run_dir: str
    holder_ending: str | None = None  # the holder's "ending" marker: no ranks start once it exists
    python_env: PythonEnv | None = None  # None: the site file's ROACH_ENV


def render_step(i: AttemptInputs) -> str:
    """``step.sh``: what runs on the nodes. ``prepare`` (one task per node) makes the clone; ``rank`` (one
    task per GPU) becomes the rank."""
    return f"""#!/bin/bash
# roach attempt {i.attempt} of run {i.run_id} inside holder {i.holder}: the nodes' side (docs/hold.md).
set -euo pipefail

# --- site file of cluster {i.cluster.name} ---
{i.cluster.site_file().rstrip()}
# --- end of site file ---
export ROACH_ENV={shlex.quote(i.python_env or i.cluster.site_python_env())}  # how the job's Python is made (node.sh)

source {shlex.quote(i.paths.node_sh)}
case "${{1:-}}" in
  prepare)
    roach_prepare
    # The first node picks the rendezvous port, free there now, for the driver to give every rank.
    if [ "${{SLURMD_NODENAME:-$(hostname -s)}}" = "$ROACH_MASTER_NODE" ]; then
      roach_free_port "$(roach_python "$(roach_clone_dir)")" "$ROACH_MASTER_PORT_FROM" > "$ROACH_BUNDLE/master_port.tmp"
      mv -f "$ROACH_BUNDLE/master_port.tmp" "$ROACH_BUNDLE/master_port"
    fi ;;
  rank)
    clone="$(roach_clone_dir)"
    export ROACH_CLONE_DIR="$clone"
    py="$(roach_python "$clone")"
    export PYTHONPATH="$ROACH_ROACH_PATH:$clone${{PYTHONPATH:+:$PYTHONPATH}}"
    run_dir="$(roach_expand "$ROACH_RUN_DIR")"
    mkdir -p "$run_dir"
    cd "$run_dir"
    roach_block_signals {shlex.quote(i.cluster.checkpoint_signal)}
    exec ${{ROACH_BLOCK[@]+"${{ROACH_BLOCK[@]}}"}} "$py" -m roach.slurm.run {shlex.quote(i.paths.spec)} ;;
  *) echo "usage: step.sh prepare|rank" >&2; exit 2 ;;
esac
"""


def render_driver(i: AttemptInputs) -> str:
    """``driver.sh``: runs detached on the submit host; its output is the run's log."""
    q, res, p = shlex.quote, i.resources, i.paths
    exports = {
        "ROACH_RUN_ID": i.run_id,
        "ROACH_REPO_URL": i.repo_url,
        "ROACH_REPO_NAME": i.repo_name,
        "ROACH_COMMIT": i.commit,
        "ROACH_CLONE_ROOT": i.clone_root,
        "ROACH_ROACH_PATH": i.roach_path,
        "ROACH_RUN_DIR": i.run_dir,
        "ROACH_BUNDLE": p.bundle_dir,
        "ROACH_INSIDE_HOLDER": str(i.holder),
        "ROACH_ATTEMPT": str(i.attempt),
        "ROACH_LEFT_MARKER": p.left,
        "ROACH_MASTER_NODE": i.nodes[0],
        "ROACH_MASTER_PORT_FROM": str(20000 + (i.holder + 1009 * i.attempt) % 20000),
    }
    export_lines = "\n".join(f"export {k}={q(v)}" for k, v in exports.items())
    n = len(i.nodes)
    common = [f"--jobid={i.holder}", "--overlap", f"--nodelist={','.join(i.nodes)}", f"--nodes={n}"]
    cpus = res.cpus_per_gpu or res.cpus_per_task
    per_task = [f"--cpus-per-task={cpus}"] if cpus else []
    gpus = []
    if res.gpus_per_node and res.gpus_per_node < i.gpus_per_node:  # a part of the holder's GPUs
        gpus = [
            f"--gres=gpu:{res.gpus_per_node}"
            if i.cluster.gpu_flag == "gres"
            else f"--gpus-per-node={res.gpus_per_node}"
        ]
    node_step = " ".join(
        q(a)
        for a in [
            "srun",
            *common,
            f"--job-name={STEP_NODE}:{i.attempt}",
            f"--ntasks={n}",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=1",
            "bash",
            p.step_sh,
            "prepare",
        ]
    )
    ranks_step = " ".join(
        q(a)
        for a in [
            "srun",
            *common,
            f"--job-name={STEP_RANKS}:{i.attempt}",
            f"--ntasks={n * res.tasks_per_node}",
            f"--ntasks-per-node={res.tasks_per_node}",
            *per_task,
            *gpus,
            "--kill-on-bad-exit=1",
            f"--wait={i.cluster.rank_exit_wait_s}",
            "--label",
            "bash",
            p.step_sh,
            "rank",
        ]
    )
    ending_check = (
        ""
        if i.holder_ending is None
        else f"""if [ -e {q(i.holder_ending)} ]; then
  echo "roach: holder {i.holder} is near its wall clock and stopped its attempts; the ranks did not start"
  finish 130
fi
"""
    )
    return f"""#!/bin/bash
# roach attempt {i.attempt} of run {i.run_id} inside holder {i.holder}: started detached on the submit host by
# submit(inside={i.holder}); its output is the run's log. It runs the node step, then the ranks' step, as steps
# of the holder, and writes its exit status to the file `exit` beside it (docs/hold.md).
set -uo pipefail
# Another allocation's variables (a shell inside a job) would change what srun does here.
for v in $(compgen -e); do case "$v" in SLURM_CONF) ;; SLURM_*) unset "$v" ;; esac; done
{export_lines}
now() {{ date -u +%Y-%m-%dT%H:%M:%SZ; }}
finish() {{
  printf '{{"exit_code": %d, "ended_at_utc": "%s"}}\\n' "$1" "$(now)" > "$ROACH_BUNDLE/exit.tmp"
  mv -f "$ROACH_BUNDLE/exit.tmp" "$ROACH_BUNDLE/exit"
  exit "$1"
}}
echo "$(hostname) $$" > "$ROACH_BUNDLE/driver.pid"
echo "roach: attempt {i.attempt} of run $ROACH_RUN_ID: inside holder {i.holder} on {",".join(i.nodes)} at $(now) \\
(a step of the holder: no requeue)"
first={q(i.nodes[0])}
MASTER_ADDR="$(scontrol show node "$first" | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p' | head -n 1)"
export MASTER_ADDR="${{MASTER_ADDR:-$first}}"
rm -f "$ROACH_BUNDLE/master_port"
{node_step}
rc=$?
if [ "$rc" -ne 0 ]; then
  echo "roach: the node step failed (exit code $rc); the ranks did not start"
  finish "$rc"
fi
MASTER_PORT="$(cat "$ROACH_BUNDLE/master_port" 2>/dev/null || true)"
if [ -z "$MASTER_PORT" ]; then
  echo "roach: the node step on $first did not pick a rendezvous port; the ranks did not start"
  finish 1
fi
export MASTER_PORT
unset ROACH_PORT_BY_RANK0  # the node step picked it: not rank 0's to pick, whatever the submitter's env said
echo "roach: rendezvous at $MASTER_ADDR:$MASTER_PORT (a port free on $first when this attempt started)"
if [ -e "$ROACH_BUNDLE/cancel" ]; then
  echo "roach: attempt {i.attempt} was cancelled before its ranks started"
  finish 130
fi
{ending_check}{ranks_step}
rc=$?
echo "roach: ranks' step ended with exit code $rc"
if [ "$rc" -ne 0 ] && [ "$rc" -ne {EXIT_LEFT} ] && [ -e "$ROACH_LEFT_MARKER" ]; then
  # rank 0 checkpointed (or could not) and left; a rank that died after that, in its teardown, changes nothing
  echo "roach: rank 0 had left to come back ($(cat "$ROACH_LEFT_MARKER" 2>/dev/null)); the attempt ends stopped"
  rc={EXIT_LEFT}
fi
finish "$rc"
"""
