#!/bin/bash
#SBATCH --job-name=train
#SBATCH --output=/home/u/roach/my-repo/slurm-logs/train-20261201-120000-abcd_%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=USR1@120
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=01:00:00
#SBATCH --gres=gpu:2
# roach job train-20261201-120000-abcd: 0123456789ab of my-repo. What a job does: roach/slurm/README.md.
set -euo pipefail
export ROACH_REPO_URL=git@github.com:lab/my-repo.git
export ROACH_REPO_NAME=my-repo
export ROACH_COMMIT=0123456789abcdef0123456789abcdef01234567
export ROACH_CLONE_ROOT='~/roach_clones'
export ROACH_ROACH_PATH=/home/u/roach/my-repo/slurm-logs/bundles/roach-1a2b
export ROACH_RUN_ID=train-20261201-120000-abcd
export ROACH_RUN_DIR='~/roach/my-repo/runs/train-20261201-120000-abcd'
export ROACH_BUNDLE=/home/u/roach/my-repo/slurm-logs/bundles/"$SLURM_JOB_ID"

# --- site file of cluster ilc ---
# Site file of ILC, sourced by every roach job there before roach's own steps.
# A project's lock file says how its Python is made (uv.lock: uv, pixi.lock: pixi); pixi where it has neither.
# Each clone builds it once (node.sh). ~ is the node-local home; ~/scratch is the shared store.
ROACH_ENV=pixi
if [ -d "$HOME/.pixi/bin" ]; then export PATH="$HOME/.pixi/bin:$PATH"; fi
# uv, for a project with a uv.lock: where its installer puts it, after the site's own commands
if [ -x "$HOME/.local/bin/uv" ]; then export PATH="$PATH:$HOME/.local/bin"; fi
export ROACH_SCRATCH="$HOME/scratch"
# --- end of site file ---
export ROACH_ENV=pixi  # how the job's Python is made (node.sh)

# One node: only node.sh's first functions (--hot: bash stops reading it there); several: all of them.
if [ "$SLURM_JOB_NUM_NODES" -eq 1 ]; then source "$ROACH_BUNDLE/node.sh" --hot; else source "$ROACH_BUNDLE/node.sh"; fi
roach_expand_to run_dir "$ROACH_RUN_DIR"
roach_utc_now started_at
echo "roach: attempt $(( ${SLURM_RESTART_COUNT:-0} + 1 )) of run $ROACH_RUN_ID: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST (restart count ${SLURM_RESTART_COUNT:-0}) at $started_at"
# Preemption signals every process of the job: the batch shell must outlive the ranks' checkpoint.
trap 'echo "roach: batch script caught SIGTERM; the ranks checkpoint and leave"' TERM
trap 'echo "roach: batch script caught SIGUSR1"' USR1
# The first node's address, read before the ranks start: where the allocation is this one node, every rank runs
# here and rendezvous on loopback (no question to slurmctld); else the first node's NodeAddr, asked of slurmctld
# in the background while the node prepares.
roach_addr=""
[ "$SLURM_JOB_NUM_NODES" -eq 1 ] || exec {roach_addr}< <(roach_master_addr)
roach_clone_dir_to clone
if [ "$SLURM_JOB_NUM_NODES" -eq 1 ]; then  # the one node is this one, where the batch script runs: no job step,
  # and nothing at all but a line where the clone is ready (what prepare looks at first); else prepare in its own bash, as
  # srun's task would run it (the same environment)
  roach_ready_to ready "$clone"
  if [ -e "$ready" ]; then roach_env_reused "$clone"; else bash "$ROACH_BUNDLE/node.sh" prepare || roach_prepare_failed $?; fi
else  # a prepare that fails ends the job here: exit 7 where the environment could not be built (env_failed)
  srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 \
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
  exec {roach_port}< <(roach_free_port "$py" $(( 20000 + SLURM_JOB_ID % 20000 )))
  rc=1 first="" MASTER_ADDR="" MASTER_PORT=""
  read -r rc first MASTER_ADDR <&"$roach_addr" || :
  exec {roach_addr}<&-
  [ "$rc" = 0 ] || exit "$rc"
  export MASTER_ADDR="${MASTER_ADDR:-$first}"
  read -r MASTER_PORT <&"$roach_port" || :
  exec {roach_port}<&-
  export MASTER_PORT
  echo "roach: rendezvous at $MASTER_ADDR:$MASTER_PORT (a port free on $first when this attempt started)"
fi
export PYTHONPATH="$ROACH_ROACH_PATH:$clone${PYTHONPATH:+:$PYTHONPATH}"
roach_block_signals USR1
# The ranks start in the shipped runtime (the first entry of PYTHONPATH, which Python puts before it as the working
# directory of `-m`), then make the run directory and work in it (roach/runtime/rank.py): no mkdir here first.
cd "$ROACH_ROACH_PATH"
srun --kill-on-bad-exit=1 --wait=60 --label ${ROACH_BLOCK[@]+"${ROACH_BLOCK[@]}"}   "$py" -m roach.slurm.run "$ROACH_BUNDLE/spec.json" &
ranks=$!
while kill -0 "$ranks" 2>/dev/null; do wait "$ranks" || true; done
wait "$ranks" && rc=0 || rc=$?
if [ -e "$run_dir/.roach/left.$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}" ]; then
  echo "roach: the ranks left to come back (exit code $rc); ending this attempt cleanly"
  exit 0
fi
[ "$rc" -eq 0 ] || echo "roach: the ranks' step ended with exit code $rc"
exit "$rc"
