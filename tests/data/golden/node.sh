#!/bin/bash
# roach's node script. The batch script sources it for its functions, then runs `node.sh prepare` on each node
# before the ranks start: itself when the allocation is one node (the node it runs on), else once per node
# (srun, one task per node).
#
# prepare: make the shared, read-only clone of the job's commit on this node, once:
#   <clone_root>/<repo>-<commit>, made under a lock so concurrent jobs clone once; built in a temporary
#   directory and renamed, then the environment is made in it, then a marker is written and the tree is
#   made read-only. A clone without the marker is half-made (its job died) and is rebuilt, never used.
#   A uv or pixi environment is built in the clone under the same lock (`uv sync --frozen`, `pixi install
#   --frozen`), its caches in the site's scratch, compiled to bytecode with the clone's modules (roach_compile),
#   and marked done by .roach-env-<uv|pixi> (the seconds it took),
#   which every later rank and attempt at that commit reuses; one without its mark is half-made and is built
#   again. A build that fails leaves no environment behind, writes env_failed (the tool's last lines) into the
#   job's bundle and job.json, and prepare exits 7 (ROACH_ENV_FAILED_EXIT): the job ends there, no rank starts.
#
# Inputs (environment): ROACH_REPO_URL ROACH_COMMIT ROACH_REPO_NAME ROACH_CLONE_ROOT (may start with ~), ROACH_BUNDLE,
# ROACH_ENV (venv|pixi|uv|system: the batch script exports the one chosen at submit), and from the cluster's site
# file: ROACH_VENV, ROACH_PYTHON, ROACH_PIXI_ENV, ROACH_SCRATCH.

ROACH_CLONE_MARKER=.roach-clone-complete
ROACH_ENV_FAILED_EXIT=7  # prepare's exit when the job's environment could not be built (docs/cli.md: exit 7)
ROACH_NODE_FAILED_EXIT=8  # prepare's exit when this node cannot hold the clone (no space left, read-only)
ROACH_MAX_EXCLUDED=2  # nodes a job may exclude, in all, after a node-local prepare failure (roach_exclude_failed_nodes)
# The env that starts the ranks with their signals blocked: by its path, not the first on PATH (a site file's PATH
# must not decide whether a rank's signals are blocked).
ROACH_ENV_BIN=/usr/bin/env
ROACH_BLOCK_YES_DIR=/tmp  # where env's yes is remembered (roach_block_signals): node-local

roach_expand() {  # ~ means the home of the user the job runs as, on the node it runs on
  case "$1" in
    "~") printf '%s\n' "$HOME" ;;
    "~/"*) printf '%s/%s\n' "$HOME" "${1#"~/"}" ;;
    *) printf '%s\n' "$1" ;;
  esac
}

roach_expand_to() {  # $1: a variable, set to what `roach_expand "$2"` prints (without a subshell)
  case "$2" in
    "~") printf -v "$1" '%s' "$HOME" ;;
    "~/"*) printf -v "$1" '%s/%s' "$HOME" "${2#"~/"}" ;;
    *) printf -v "$1" '%s' "$2" ;;
  esac
}

roach_utc_now() {  # $1: a variable, set to the time now in UTC as `date -u +%Y-%m-%dT%H:%M:%SZ` prints it
  if [ "${BASH_VERSINFO[0]}" -ge 5 ]; then
    TZ=UTC0 printf -v "$1" '%(%Y-%m-%dT%H:%M:%SZ)T' -1  # bash's own strftime: no `date` to start
  else
    printf -v "$1" '%s' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  fi
}

roach_clone_dir() {
  printf '%s/%s-%s\n' "$(roach_expand "$ROACH_CLONE_ROOT")" "$ROACH_REPO_NAME" "$ROACH_COMMIT"
}

roach_clone_dir_to() {  # $1: a variable, set to what roach_clone_dir prints (without a subshell)
  roach_expand_to "$1" "$ROACH_CLONE_ROOT"
  printf -v "$1" '%s/%s-%s' "${!1}" "$ROACH_REPO_NAME" "$ROACH_COMMIT"
}

roach_python() {  # the interpreter the ranks run, for the clone in $1
  case "${ROACH_ENV:-system}" in
    venv) printf '%s/bin/python\n' "$(roach_expand "${ROACH_VENV:?the site file sets ROACH_ENV=venv but no ROACH_VENV}")" ;;
    pixi) printf '%s/.pixi/envs/%s/bin/python\n' "$1" "${ROACH_PIXI_ENV:-default}" ;;
    uv) printf '%s/.venv/bin/python\n' "$1" ;;
    system) command -v "${ROACH_PYTHON:-python3}" ;;
    *) echo "roach: unknown ROACH_ENV=${ROACH_ENV} in the site file (valid: venv pixi uv system)" >&2; return 2 ;;
  esac
}

roach_python_to() {  # $1: a variable, set to what `roach_python "$2"` prints (a subshell only for ROACH_ENV=system)
  case "${ROACH_ENV:-system}" in
    venv)
      roach_expand_to "$1" "${ROACH_VENV:?the site file sets ROACH_ENV=venv but no ROACH_VENV}"
      printf -v "$1" '%s/bin/python' "${!1}"
      ;;
    pixi) printf -v "$1" '%s/.pixi/envs/%s/bin/python' "$2" "${ROACH_PIXI_ENV:-default}" ;;
    uv) printf -v "$1" '%s/.venv/bin/python' "$2" ;;
    *)
      local roach_py_found
      roach_py_found="$(roach_python "$2")" || return
      printf -v "$1" '%s' "$roach_py_found"
      ;;
  esac
}

roach_ready_to() {  # $1: a variable, set to the file whose presence says the clone in $2 is ready for ROACH_ENV
  case "${ROACH_ENV:-system}" in
    uv|pixi) printf -v "$1" '%s/.roach-env-%s' "$2" "$ROACH_ENV" ;;
    *) printf -v "$1" '%s/%s' "$2" "$ROACH_CLONE_MARKER" ;;
  esac
}

roach_env_reused() {  # $1: a ready clone. Says, for a uv or pixi environment, that it was reused and what that saved.
  case "${ROACH_ENV:-system}" in uv|pixi) ;; *) return 0 ;; esac
  local took="" built="" node=""
  read -r took built node < "$1/.roach-env-$ROACH_ENV" 2>/dev/null || :
  echo "roach: ${SLURMD_NODENAME:-$HOSTNAME}: reused the $ROACH_ENV environment of $ROACH_COMMIT in $1" \
    "(built in ${took:-?} s on ${node:-?} at ${built:-?}: ${took:-?} s saved)"
}

roach_prepare_failed() {  # $1: the prepare's exit code. Ends the batch script: exit 7 where the environment failed;
  # where a node could not hold the clone, the job is requeued without that node (roach_exclude_failed_nodes).
  if [ -e "$ROACH_BUNDLE/env_failed" ]; then
    echo "roach: env_failed: the job's $ROACH_ENV environment could not be built; no rank started (exit $ROACH_ENV_FAILED_EXIT)"
    exit "$ROACH_ENV_FAILED_EXIT"
  fi
  roach_exclude_failed_nodes
  exit "$1"
}

roach_exclude_failed_nodes() {  # Where prepare failed on nodes of this attempt for a node-local cause (each left
  # node_failed.<restart>.<node> in the bundle): requeues the job held, adds those nodes to its ExcNodeList, releases
  # it and ends this attempt (exit 0), so the next one runs elsewhere. At most ROACH_MAX_EXCLUDED nodes a job, counted
  # in excluded.<job id>; past that, or where Slurm refuses, it says so and returns (the job fails as it is).
  local prefix="$ROACH_BUNDLE/node_failed.${SLURM_RESTART_COUNT:-0}." f failed=() causes="" done_file info list
  for f in "$prefix"*; do
    [ -e "$f" ] || continue
    failed+=("${f#"$prefix"}")
    causes+="${causes:+; }$(head -n 1 "$f")"
  done
  [ "${#failed[@]}" -gt 0 ] || return 0
  done_file="$ROACH_BUNDLE/excluded.$SLURM_JOB_ID"
  local before=0
  [ ! -e "$done_file" ] || before="$(wc -l < "$done_file")"
  if [ $(( before + ${#failed[@]} )) -gt "$ROACH_MAX_EXCLUDED" ]; then
    echo "roach: node_failed: not excluding ${failed[*]}: job $SLURM_JOB_ID already excluded $before node(s)" \
      "(at most $ROACH_MAX_EXCLUDED); the job ends here"
    return 0
  fi
  info="$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null)" || info=""
  list=""
  if [[ "$info" =~ (^|[ $'\n'])ExcNodeList=([^ $'\n']*) ]] && [ "${BASH_REMATCH[2]}" != "(null)" ]; then
    list="${BASH_REMATCH[2]}"
  fi
  printf -v f '%s,' "${failed[@]}"
  list="${list:+$list,}${f%,}"
  trap '' TERM  # the requeue signals this script, which must live to release the job
  if ! scontrol requeuehold "$SLURM_JOB_ID"; then
    echo "roach: node_failed: could not requeue job $SLURM_JOB_ID to exclude ${failed[*]}; the job ends here"
    return 0
  fi
  scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$list" ||
    echo "roach: node_failed: Slurm refused ExcNodeList=$list for job $SLURM_JOB_ID; it runs wherever Slurm puts it"
  roach_note_attempt "$causes" "$list" "${failed[@]}"  # before the release: no next attempt writes job.json meanwhile
  scontrol release "$SLURM_JOB_ID" ||
    echo "roach: node_failed: job $SLURM_JOB_ID is requeued held: release it with \`scontrol release $SLURM_JOB_ID\`"
  printf '%s\n' "${failed[@]}" >> "$done_file"
  echo "roach: excluded node ${failed[*]} from job $SLURM_JOB_ID of run $ROACH_RUN_ID ($causes): attempt" \
    "$(( ${SLURM_RESTART_COUNT:-0} + 2 )) runs on other nodes (ExcNodeList=$list; $(( before + ${#failed[@]} )) of at" \
    "most $ROACH_MAX_EXCLUDED nodes excluded)"
  exit 0
}

roach_json_text() {  # $1: text. Prints it as a JSON string (quotes, backslashes and control characters escaped).
  local t="$1"
  t="${t//\\/\\\\}"; t="${t//\"/\\\"}"; t="${t//$'\n'/\\n}"; t="${t//$'\r'/\\r}"; t="${t//$'\t'/\\t}"
  t="$(printf '%s' "$t" | tr -d '\000-\037')"
  printf '"%s"' "$t"
}

roach_job_json() {  # this run's job.json: an array task's is in a bundle of its own, beside the array's ROACH_BUNDLE
  if [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then printf '%s_%s/job.json\n' "$ROACH_BUNDLE" "$SLURM_ARRAY_TASK_ID"
  else printf '%s/job.json\n' "$ROACH_BUNDLE"; fi
}

roach_edit_job_json() {  # $1: an awk program that prints job.json anew, reading the new JSON text from
  # ENVIRON["ROACH_JSON"]; $2: that text. Rewrites this run's job.json through it, atomically (a temp file beside it).
  local jj tmp
  jj="$(roach_job_json)"; tmp="$jj.edit.$$"
  ROACH_JSON="$2" awk "$1" "$jj" > "$tmp" && chmod 644 "$tmp" && mv -f "$tmp" "$jj" || { rm -f "$tmp"; return 1; }
}

roach_note_attempt() {  # $1: the causes; $2: the job's ExcNodeList now; then the nodes this attempt failed on.
  # Appends this attempt to job.json's "attempts" (one line of JSON, written [] at submit); a job.json without the
  # key (an older roach's) is left as it is.
  local causes="$1" exc="$2" n nodes="" entry jj
  shift 2
  jj="$(roach_job_json)"
  for n in "$@"; do nodes+="${nodes:+, }$(roach_json_text "$n")"; done
  entry="{\"attempt\": $(( ${SLURM_RESTART_COUNT:-0} + 1 )), \"job_id\": $(roach_json_text "$SLURM_JOB_ID"),"
  entry+=" \"nodes\": [$nodes], \"ended\": \"node_failed\", \"causes\": $(roach_json_text "$causes"),"
  entry+=" \"exc_node_list\": $(roach_json_text "$exc")}"
  [ -f "$jj" ] && grep -q '^  "attempts": \[.*\],$' "$jj" || return 0
  roach_edit_job_json 'index($0, "  \"attempts\": [") == 1 && substr($0, length($0) - 1) == "],"{
      head = substr($0, 1, length($0) - 2); sep = (head ~ /\[$/) ? "" : ", "
      print head sep ENVIRON["ROACH_JSON"] "],"; next } { print }' "$entry" || :
}

roach_block_signals() {  # $1: the checkpoint signal. Sets ROACH_BLOCK, a prefix for the ranks' command.
  # A rank that gets its checkpoint signal (or TERM) before run.py has installed its handlers would die of
  # it (Slurm may send the wall clock's signal at once after a requeue). Started through
  # `env --block-signal`, the signal waits, pending, until run.py unblocks it with its handlers in place.
  # coreutils 8.31+ (Debian 11, RHEL 9); an older env has no such option and the ranks start as before.
  # env's yes is remembered for this boot of this node: a file of this user's in node-local $ROACH_BLOCK_YES_DIR
  # named by the kernel's boot id (env gains the option with an upgrade and could lose it only with another image, which boots; a /tmp shared by
  # nodes still keeps one answer per node),
  # so a job asks env once per node and boot, not once per start (~1 ms, forked before the ranks start).
  ROACH_BLOCK=()
  local boot="" yes=""
  if read -r boot 2>/dev/null < /proc/sys/kernel/random/boot_id && [ -n "$boot" ]; then
    yes="$ROACH_BLOCK_YES_DIR/.roach-env-blocks-$1.$UID.$boot"
  fi
  if [ -n "$yes" ] && [ -O "$yes" ]; then
    :
  elif "$ROACH_ENV_BIN" --block-signal="$1" --version >/dev/null 2>&1; then
    [ -z "$yes" ] || { : > "$yes"; } 2>/dev/null || :
  else
    return 0
  fi
  ROACH_BLOCK=("$ROACH_ENV_BIN" --block-signal="$1" --block-signal=TERM)
}

# A one-node job's batch script sources this file with --hot: it needs only the functions above, and bash reads a
# sourced file as it runs it, so the rest is not even parsed (the prepare runs in its own bash, which reads it all).
[ "${1:-}" != --hot ] || return 0

roach_env_dir() {  # the environment's directory inside the clone $1 (what a failed or half-made build leaves);
  # pixi's .pixi/envs, not .pixi, where a project may commit its config.toml
  case "${ROACH_ENV:-system}" in
    uv) printf '%s/.venv\n' "$1" ;;
    pixi) printf '%s/.pixi/envs\n' "$1" ;;
  esac
}

roach_env_failed() {  # $1: the clone; $2: the tool's exit code; $3: its output; $4: what failed, where not the tool.
  # Records env_failed; returns 7.
  local node="${SLURMD_NODENAME:-$HOSTNAME}" tail what json tmp jj
  tail="$(tail -n 20 "$3" 2>/dev/null)" || tail=""
  what="$node: ${4:-\`$(roach_env_command)\` exited $2} building the $ROACH_ENV environment of $ROACH_COMMIT in $1"
  echo "roach: env_failed: $what; its output is above. Nothing of it was kept: the next job builds it again." >&2
  if [ -n "${ROACH_BUNDLE:-}" ] && [ -d "$ROACH_BUNDLE" ]; then
    tmp="$ROACH_BUNDLE/.env_failed.$node.$$"
    printf '%s\n%s\n' "$what" "$tail" > "$tmp" && mv -f "$tmp" "$ROACH_BUNDLE/env_failed"
    json="{\"kind\": \"env_failed\", \"node\": $(roach_json_text "$node"), \"exit_code\": $2, \"message\": $(roach_json_text "$what"), \"output\": $(roach_json_text "$tail")}"
    # job.json's last key, written null at submit: the end's own keys are written later, by the submit host
    jj="$(roach_job_json)"
    if [ -f "$jj" ] && grep -q '^  "failure": null$' "$jj"; then
      roach_edit_job_json '$0 == "  \"failure\": null" { print "  \"failure\": " ENVIRON["ROACH_JSON"]; next } { print }' \
        "$json" || :
    fi
    rm -f "$tmp"
  fi
  return "$ROACH_ENV_FAILED_EXIT"
}

roach_env_command() {
  case "${ROACH_ENV:-system}" in
    uv) echo "uv sync --frozen" ;;
    pixi) echo "pixi install --frozen -e ${ROACH_PIXI_ENV:-default}" ;;
  esac
}

roach_env_stopped() {  # prepare's trap while the clone is writable: an environment not marked done is removed and
  # the clone made read-only again (another node's prepare failed, the job was cancelled): nothing half-made is left
  local env_dir="${roach_building[0]}" clone="${roach_building[2]}"
  if [ -n "$env_dir" ] && [ -e "$env_dir" ] && [ ! -e "$clone/.roach-env-$ROACH_ENV" ]; then
    echo "roach: ${SLURMD_NODENAME:-$HOSTNAME}: stopped while building $env_dir: removed"
    rm -rf "$env_dir"
  fi
  rm -f "${roach_building[1]}"
  chmod -R a-w "$clone"
  exit 143
}

roach_seconds_since() {  # $1: a variable, set to the seconds since $2 (a `date +%s.%N`), to a tenth
  printf -v "$1" '%s' "$(awk -v a="$2" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
}

roach_compile() {  # $1: a clone whose uv or pixi environment was just built, still writable; $2: its Python.
  # Compiles to bytecode what the ranks import: the clone's own modules and the environment's site-packages (neither
  # tool compiles at install). A rank can keep nothing it compiles in the read-only tree, so each rank of each attempt
  # would compile every module it imports again (torch with torch._dynamo: 5.0 s a rank against 2.2 s). Only what
  # lies inside the clone is written; a file that does not compile is left as it is.
  local site start took jobs
  jobs="$(nproc 2>/dev/null)" || jobs=1
  start="$(date +%s.%N)"
  "$2" -m compileall -qq -j "$jobs" -x '/\.(git|venv|pixi)/' "$1" > /dev/null 2>&1 || :
  site="$("$2" -c 'import sysconfig; print(sysconfig.get_path("purelib"))' 2>/dev/null)" || site=""
  case "$site" in "$1"/*) "$2" -m compileall -qq -j "$jobs" "$site" > /dev/null 2>&1 || : ;; esac
  roach_seconds_since took "$start"
  echo "roach: ${SLURMD_NODENAME:-$HOSTNAME}: compiled $1's Python to bytecode in $took s"
}

roach_make_env() {  # build the environment inside the clone $1, writable, under the clone's lock
  case "${ROACH_ENV:-system}" in
    uv|pixi) ;;
    venv|system) return 0 ;;
    *) echo "roach: unknown ROACH_ENV=${ROACH_ENV} (valid: uv pixi venv system)" >&2; return 2 ;;
  esac
  local env_dir out rc=0 start took built
  env_dir="$(roach_env_dir "$1")"
  [ ! -e "$env_dir" ] || { echo "roach: ${SLURMD_NODENAME:-$HOSTNAME}: removing half-made environment $env_dir"; rm -rf "$env_dir"; }
  if [ -n "${ROACH_SCRATCH:-}" ]; then  # the caches in the site's scratch, shared by the nodes that share it
    export UV_CACHE_DIR="${UV_CACHE_DIR:-$ROACH_SCRATCH/.cache/uv}" PIXI_CACHE_DIR="${PIXI_CACHE_DIR:-$ROACH_SCRATCH/.cache/pixi}"
  fi
  out="$(mktemp "${TMPDIR:-/tmp}/roach-env.XXXXXX")"
  roach_building[1]="$out"
  start="$(date +%s.%N)"
  echo "roach: ${SLURMD_NODENAME:-$HOSTNAME}: building the $ROACH_ENV environment of $ROACH_COMMIT: $(roach_env_command)"
  case "$ROACH_ENV" in
    uv) (cd "$1" && exec uv sync --frozen) > "$out" 2>&1 || rc=$? ;;
    pixi) (cd "$1" && exec pixi install --frozen -e "${ROACH_PIXI_ENV:-default}") > "$out" 2>&1 || rc=$? ;;
  esac
  cat "$out" >&2
  local py="" too_old=""
  if [ "$rc" -eq 0 ]; then  # the ranks run roach's runtime in it: a Python it cannot run is this build's failure
    roach_python_to py "$1"
    if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' > "$out" 2>&1; then
      rc=1 too_old="its Python $py ($("$py" --version 2>&1 || echo missing)) is not the 3.11 or later roach runs on"
      case "$ROACH_ENV" in
        uv) echo "roach: $too_old: set requires-python = \">=3.11\" in pyproject.toml and lock again" >> "$out" ;;
        pixi) echo "roach: $too_old: add python = \">=3.11\" to pixi.toml's dependencies and lock again" >> "$out" ;;
      esac
      cat "$out" >&2
    fi
  fi
  if [ "$rc" -ne 0 ]; then
    trap '' TERM INT  # the failure is written whole before anything may stop this prepare (roach_env_stopped)
    rm -rf "$env_dir"
    local cause
    cause="$(roach_node_cause "$(tail -c 65536 "$out")")"
    if [ -n "$cause" ]; then  # this node's disk, not the project: the job goes on without this node
      roach_node_failed "$cause building the $ROACH_ENV environment of $ROACH_COMMIT in $env_dir" || rc=$?
    else
      roach_env_failed "$1" "$rc" "$out" "$too_old" || rc=$?
    fi
    rm -f "$out"
    return "$rc"
  fi
  rm -f "$out"
  roach_compile "$1" "$py"
  roach_seconds_since took "$start"
  roach_utc_now built
  printf '%s %s %s\n' "$took" "$built" "${SLURMD_NODENAME:-$HOSTNAME}" > "$1/.roach-env-$ROACH_ENV"
  echo "roach: ${SLURMD_NODENAME:-$HOSTNAME}: built the $ROACH_ENV environment of $ROACH_COMMIT in $took s"
}

roach_node_cause() {  # $1: a failed command's output. Prints the node-local cause it names, or nothing.
  case "$1" in
    *"No space left on device"*) echo "no space left on device" ;;
    *"Disk quota exceeded"*) echo "disk quota exceeded" ;;
    *"Read-only file system"*) echo "read-only file system" ;;
  esac
}

roach_clone_step() {  # $1: what the step does, with its path; then its command. Runs it with its output kept: where
  # it fails for a node-local cause, says that in one line, records it in the bundle (node_failed.<restart>.<node>,
  # read by roach_exclude_failed_nodes) and returns ROACH_NODE_FAILED_EXIT; any other failure prints the output and
  # returns the command's exit code.
  local what="$1" out rc=0 cause
  shift
  out="$("$@" 2>&1)" || rc=$?
  if [ "$rc" -eq 0 ]; then
    [ -z "$out" ] || printf '%s\n' "$out"
    return 0
  fi
  cause="$(roach_node_cause "$out")"
  if [ -z "$cause" ]; then
    printf '%s\n' "$out" >&2
    return "$rc"
  fi
  roach_node_failed "$cause $what"
}

roach_node_failed() {  # $1: what failed on this node, and where. Says it in one line, records it in the bundle
  # (node_failed.<restart>.<node>, read by roach_exclude_failed_nodes) and returns ROACH_NODE_FAILED_EXIT.
  local node="${SLURMD_NODENAME:-$HOSTNAME}" line
  line="$node: $1"
  echo "roach: node_failed: $line; no rank started"
  if [ -n "${ROACH_BUNDLE:-}" ] && [ -d "$ROACH_BUNDLE" ]; then
    printf '%s\n' "$line" > "$ROACH_BUNDLE/node_failed.${SLURM_RESTART_COUNT:-0}.$node" || :
  fi
  return "$ROACH_NODE_FAILED_EXIT"
}

roach_prepare() {
  set -euo pipefail
  local clone root tmp head ready rc=0
  roach_clone_dir_to clone
  roach_ready_to ready "$clone"
  if [ -e "$ready" ]; then roach_env_reused "$clone"; return 0; fi
  root="${clone%/*}"
  root="${root:-/}"
  roach_clone_step "making the clone root $root" mkdir -p "$root" || return
  exec 9>>"$root/.$ROACH_REPO_NAME-$ROACH_COMMIT.lock"
  flock 9
  if [ -e "$ready" ]; then  # made while this node waited for the lock
    roach_env_reused "$clone"
  else
    if [ ! -e "$clone/$ROACH_CLONE_MARKER" ]; then
      if [ -e "$clone" ]; then
        echo "roach: $(hostname): removing half-made clone $clone"
        chmod -R u+w "$clone" && rm -rf "$clone"
      fi
      tmp="$clone.tmp.$(hostname).$$"
      rm -rf "$tmp"
      roach_clone_step "cloning $ROACH_COMMIT into $tmp" git clone --quiet --no-checkout "$ROACH_REPO_URL" "$tmp" ||
        { rc=$?; rm -rf "$tmp"; return "$rc"; }
      roach_clone_step "checking out $ROACH_COMMIT in $tmp" \
        git -C "$tmp" -c advice.detachedHead=false checkout --quiet --detach "$ROACH_COMMIT" ||
        { rc=$?; rm -rf "$tmp"; return "$rc"; }
      head="$(git -C "$tmp" rev-parse HEAD)"
      if [ "$head" != "$ROACH_COMMIT" ]; then
        echo "roach: clone of $ROACH_REPO_URL is at $head, not $ROACH_COMMIT" >&2
        rm -rf "$tmp"
        return 1
      fi
      mv -T "$tmp" "$clone"
      roach_clone_step "marking the clone $clone complete" touch "$clone/$ROACH_CLONE_MARKER" || return
      echo "roach: ${SLURMD_NODENAME:-$(hostname)}: cloned $ROACH_COMMIT into $clone (read-only)"
    else
      chmod u+w "$clone"  # a complete clone gains this job's environment beside the others' (its top only)
    fi
    roach_building=("$(roach_env_dir "$clone")" "" "$clone")
    trap roach_env_stopped TERM INT
    roach_make_env "$clone" || rc=$?
    chmod -R a-w "$clone"
    trap - TERM INT
  fi
  exec 9>&-
  return "$rc"
}

roach_master_addr() {  # prints "<status> <first node> <its NodeAddr>"; status 0, or the exit code of what failed
  # (the batch script starts it in the background, so slurmctld's answer comes while the node prepares)
  # (a one-node job asks nothing: its ranks rendezvous on loopback)
  local first addr
  first="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)" || { echo "$? -"; return 0; }
  addr="$(scontrol show node "$first")" || { echo "$? $first"; return 0; }
  # its first NodeAddr=<word> (words end at a space or a line's end), read here rather than by tr, sed and head
  if [[ "$addr" =~ (^|[ $'\n'])NodeAddr=([^ $'\n']*) ]]; then addr="${BASH_REMATCH[2]}"; else addr=""; fi
  echo "0 $first $addr"
}

roach_free_port() {  # $1: a python; $2: the first port to try. Prints a TCP port free on this node now.
  # Free now, not derived from the job id alone: two jobs on a node whose ids differ by 20000, or a port
  # another program holds, would make the rendezvous fail. Tried from $2 upwards in 20000-39999.
  # The kernel's TCP tables (/proc/net/tcp, tcp6) list every socket of this node's network namespace that holds
  # a port (listening, connected, closing): the first port none of them holds, read by one awk, costs no Python
  # start (tens of ms before the ranks). Where they cannot be read, each port is tried with bind() in Python.
  local tables=() t
  for t in /proc/net/tcp /proc/net/tcp6; do [ -r "$t" ] && tables+=("$t"); done
  if [ "${#tables[@]}" -gt 0 ]; then
    awk -v first="$2" '
      FNR > 1 { k = split($2, a, ":"); used[toupper(a[k])] = 1 }  # local_address: <ip>:<port>, in hex
      END {
        for (i = 0; i < 20000; i++) {
          p = (first - 20000 + i) % 20000; if (p < 0) p += 20000; p += 20000
          if (!(sprintf("%04X", p) in used)) { print p; exit 0 }
        }
        exit 3
      }' "${tables[@]}" && return 0
    case $? in 3) echo "roach: no free TCP port in 20000-39999 on $HOSTNAME" >&2; return 1 ;; esac
  fi
  "$1" -c '
import socket, sys
first = int(sys.argv[1])
for i in range(20000):
    port = 20000 + (first - 20000 + i) % 20000
    s = socket.socket()
    try:
        s.bind(("", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    sys.exit("roach: no free TCP port in 20000-39999 on " + socket.gethostname())
' "$2"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    prepare) roach_prepare ;;
    *) echo "usage: node.sh prepare" >&2; exit 2 ;;
  esac
fi
