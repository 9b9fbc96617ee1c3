# Site file of the AWS cluster, sourced by every roach job there before roach's own steps.
# A project's lock file says how its Python is made (uv.lock: uv, pixi.lock: pixi); pixi where it has neither.
# Each clone builds it once (node.sh).
# Paths are written as ~ and ~/scratch, meaning the same as on ILC.
ROACH_ENV=pixi
if [ -d "$HOME/.pixi/bin" ]; then export PATH="$HOME/.pixi/bin:$PATH"; fi
# uv, for a project with a uv.lock: where its installer puts it, after the site's own commands
if [ -x "$HOME/.local/bin/uv" ]; then export PATH="$PATH:$HOME/.local/bin"; fi
export ROACH_SCRATCH="$HOME/scratch"
