#!/bin/bash
# roach attempt 3 of run train-20261201-120000-abcd inside holder 4242: the nodes' side (docs/hold.md).
set -euo pipefail

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

source /home/u/roach/my-repo/slurm-logs/bundles/4242.3/node.sh
case "${1:-}" in
  prepare)
    roach_prepare
    # The first node picks the rendezvous port, free there now, for the driver to give every rank.
    if [ "${SLURMD_NODENAME:-$(hostname -s)}" = "$ROACH_MASTER_NODE" ]; then
      roach_free_port "$(roach_python "$(roach_clone_dir)")" "$ROACH_MASTER_PORT_FROM" > "$ROACH_BUNDLE/master_port.tmp"
      mv -f "$ROACH_BUNDLE/master_port.tmp" "$ROACH_BUNDLE/master_port"
    fi ;;
  rank)
    clone="$(roach_clone_dir)"
    export ROACH_CLONE_DIR="$clone"
    py="$(roach_python "$clone")"
    export PYTHONPATH="$ROACH_ROACH_PATH:$clone${PYTHONPATH:+:$PYTHONPATH}"
    run_dir="$(roach_expand "$ROACH_RUN_DIR")"
    mkdir -p "$run_dir"
    cd "$run_dir"
    roach_block_signals USR1
    exec ${ROACH_BLOCK[@]+"${ROACH_BLOCK[@]}"} "$py" -m roach.slurm.run /home/u/roach/my-repo/slurm-logs/bundles/4242.3/spec.json ;;
  *) echo "usage: step.sh prepare|rank" >&2; exit 2 ;;
esac
