# Site file of DSI, sourced by every roach job there before roach's own steps.
# A project's lock file says how its Python is made (uv.lock: uv, pixi.lock: pixi); pixi where it has neither.
# Each clone builds it once (node.sh).
# Storage paths differ between accounts: nothing here assumes /project or /scratch exists.
ROACH_ENV=pixi
if [ -d "$HOME/.pixi/bin" ]; then export PATH="$HOME/.pixi/bin:$PATH"; fi
# uv, for a project with a uv.lock: where its installer puts it, after the site's own commands
if [ -x "$HOME/.local/bin/uv" ]; then export PATH="$PATH:$HOME/.local/bin"; fi
# A job that asked for --gres=local:<SIZE> has node-local scratch here, deleted when the job ends.
if [ -d "/local/scratch/${USER:-$(id -un)}_${SLURM_JOB_ID:-}" ]; then
  export ROACH_LOCAL_SCRATCH="/local/scratch/${USER:-$(id -un)}_${SLURM_JOB_ID}"
fi
