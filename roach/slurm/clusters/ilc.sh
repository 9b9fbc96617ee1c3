# Site file of ILC, sourced by every roach job there before roach's own steps.
# The project pins its environment in pixi.toml (roach is a pixi dependency): each clone builds it once
# with `pixi install --frozen` (node.sh). ~ is the node-local home; ~/scratch is the shared store.
ROACH_ENV=pixi
if [ -d "$HOME/.pixi/bin" ]; then export PATH="$HOME/.pixi/bin:$PATH"; fi
export ROACH_SCRATCH="$HOME/scratch"
