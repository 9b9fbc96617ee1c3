#!/bin/bash
# roach attempt 3 of run train-20261201-120000-abcd inside holder 4242: started detached on the submit host by
# submit(inside=4242); its output is the run's log. It runs the node step, then the ranks' step, as steps
# of the holder, and writes its exit status to the file `exit` beside it (docs/hold.md).
set -uo pipefail
# Another allocation's variables (a shell inside a job) would change what srun does here.
for v in $(compgen -e); do case "$v" in SLURM_CONF) ;; SLURM_*) unset "$v" ;; esac; done
export ROACH_RUN_ID=train-20261201-120000-abcd
export ROACH_REPO_URL=git@github.com:lab/my-repo.git
export ROACH_REPO_NAME=my-repo
export ROACH_COMMIT=0123456789abcdef0123456789abcdef01234567
export ROACH_CLONE_ROOT='~/roach_clones'
export ROACH_ROACH_PATH=/home/u/roach/holders/bundles/roach-1a2b
export ROACH_RUN_DIR='~/roach/my-repo/runs/train-20261201-120000-abcd'
export ROACH_BUNDLE=/home/u/roach/my-repo/slurm-logs/bundles/4242.3
export ROACH_INSIDE_HOLDER=4242
export ROACH_ATTEMPT=3
export ROACH_LEFT_MARKER=/home/u/roach/my-repo/slurm-logs/bundles/4242.3/left
export ROACH_MASTER_NODE=g001
export ROACH_MASTER_PORT_FROM=27269
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
finish() {
  printf '{"exit_code": %d, "ended_at_utc": "%s"}\n' "$1" "$(now)" > "$ROACH_BUNDLE/exit.tmp"
  mv -f "$ROACH_BUNDLE/exit.tmp" "$ROACH_BUNDLE/exit"
  exit "$1"
}
echo "$(hostname) $$" > "$ROACH_BUNDLE/driver.pid"
echo "roach: attempt 3 of run $ROACH_RUN_ID: inside holder 4242 on g001,g002 at $(now) \
(a step of the holder: no requeue)"
first=g001
MASTER_ADDR="$(scontrol show node "$first" | tr ' ' '\n' | sed -n 's/^NodeAddr=//p' | head -n 1)"
export MASTER_ADDR="${MASTER_ADDR:-$first}"
rm -f "$ROACH_BUNDLE/master_port"
srun --jobid=4242 --overlap --nodelist=g001,g002 --nodes=2 --job-name=roach-node:3 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 bash /home/u/roach/my-repo/slurm-logs/bundles/4242.3/step.sh prepare
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
  echo "roach: attempt 3 was cancelled before its ranks started"
  finish 130
fi
if [ -e /home/u/roach/holders/bundles/4242/ending ]; then
  echo "roach: holder 4242 is near its wall clock and stopped its attempts; the ranks did not start"
  finish 130
fi
srun --jobid=4242 --overlap --nodelist=g001,g002 --nodes=2 --job-name=roach-ranks:3 --ntasks=2 --ntasks-per-node=1 --gres=gpu:1 --kill-on-bad-exit=1 --wait=60 --label bash /home/u/roach/my-repo/slurm-logs/bundles/4242.3/step.sh rank
rc=$?
echo "roach: ranks' step ended with exit code $rc"
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && [ -e "$ROACH_LEFT_MARKER" ]; then
  # rank 0 checkpointed (or could not) and left; a rank that died after that, in its teardown, changes nothing
  echo "roach: rank 0 had left to come back ($(cat "$ROACH_LEFT_MARKER" 2>/dev/null)); the attempt ends stopped"
  rc=3
fi
finish "$rc"
