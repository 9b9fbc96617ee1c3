# Site file of the lab cluster, sourced by every roach job there before roach's own steps.
# The lab keeps one venv for jobs beside its slurm.conf (made by `roach lab up`); the clone is put on
# PYTHONPATH, so the user's package is imported from the read-only clone.
ROACH_ENV=venv
ROACH_VENV="${SLURM_CONF:?the lab exports SLURM_CONF}"  # <state>/etc/slurm.conf -> <state>/pyenv
ROACH_VENV="${ROACH_VENV%/*}"
ROACH_VENV="${ROACH_VENV%/*}"
# uv, which builds a uv project's environment (its uv.lock) in the clone, made by `lab up` from PyPI
if [ -d "$ROACH_VENV/tools" ]; then export PATH="$PATH:$ROACH_VENV/tools"; fi
# the hosts layout's nodes reach the internet (a package index) only through the lab's proxy on this machine
if [ -r "$ROACH_VENV/etc/https_proxy" ]; then read -r HTTPS_PROXY < "$ROACH_VENV/etc/https_proxy"; export HTTPS_PROXY; fi
ROACH_VENV="$ROACH_VENV/pyenv"
# with node-local homes (`roach lab up --node-homes`) each node runs its own venv, made in its home by `lab up`
if [ -x "$HOME/.local/share/roach-lab/python/bin/python" ]; then ROACH_VENV="$HOME/.local/share/roach-lab/python"; fi
export ROACH_SCRATCH="$HOME/scratch"
