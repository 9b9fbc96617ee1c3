# Site file of the AWS cluster, sourced by every roach job there before roach's own steps.
# The project's pixi.toml pins its environment; each clone builds it once (`pixi install --frozen`).
# Paths are written as ~ and ~/scratch, meaning the same as on ILC.
ROACH_ENV=pixi
if [ -d "$HOME/.pixi/bin" ]; then export PATH="$HOME/.pixi/bin:$PATH"; fi
export ROACH_SCRATCH="$HOME/scratch"
