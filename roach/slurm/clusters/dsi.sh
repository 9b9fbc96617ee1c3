# Site file of DSI, sourced by every roach job there before roach's own steps.
# The project's pixi.toml pins its environment; each clone builds it once (`pixi install --frozen`).
# Storage paths differ between accounts: nothing here assumes /project or /scratch exists.
ROACH_ENV=pixi
if [ -d "$HOME/.pixi/bin" ]; then export PATH="$HOME/.pixi/bin:$PATH"; fi
# A job that asked for --gres=local:<SIZE> has node-local scratch here, deleted when the job ends.
if [ -d "/local/scratch/${USER:-$(id -un)}_${SLURM_JOB_ID:-}" ]; then
  export ROACH_LOCAL_SCRATCH="/local/scratch/${USER:-$(id -un)}_${SLURM_JOB_ID}"
fi
