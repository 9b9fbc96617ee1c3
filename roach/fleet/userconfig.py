"""The user's ``clusters.toml``: the values a site has that roach cannot know, and the default cluster.

A cluster module holds what is known of its site (how to reach it, whether it is metered, the presets'
GPUs and times). Accounts, exact partitions and QOS, the per-user tiers, the caps the user sets for
themselves and the host names of login hosts live here, written by the user or proposed by
``roach clusters discover NAME``. The file is read on every call (it is small) and validated whole: an
unknown key, a wrong type or an unknown cluster is an error naming the file, the key and the valid choices.

Path: ``$ROACH_CLUSTERS_TOML``, else ``$XDG_CONFIG_HOME/roach/clusters.toml`` (``~/.config/roach/...``).
A missing file means "nothing configured". The guide is ``docs/clusters/README.md``.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roach.errors import UsageError
from roach.fleet.cluster import Cluster, known_clusters, module_cluster
from roach.model.python_env import PythonEnv
from roach.model.resources import Resources
from roach.model.tiers import Tier

BUILTIN_DEFAULT = "ilc"  # the default cluster when clusters.toml names none

# key -> (type, what it means); the types are checked, the texts are the error's list of valid keys
_CLUSTER_KEYS: dict[str, tuple[str, str]] = {
    "account": ("str", "Resources.account when a submission leaves it unset"),
    "partition": ("str", "Resources.partition when a submission leaves it unset"),
    "partitions": ("list[str]", "the partitions that exist (a request naming another is refused)"),
    "qos_names": ("list[str]", "the QOS that exist, tiers' or not (a request naming another is refused)"),
    "max_gpus": ("int", "most GPUs one submission may ask for"),
    "max_gpu_hours": ("float", "most GPU-hours (GPUs x wall clock) one submission may ask for"),
    "gpu_hour_cost": ("float", "what one GPU-hour costs, where metered in money"),
    "max_cost": ("float", "most one submission may cost (needs gpu_hour_cost)"),
    "max_gpus_per_node": ("int", "GPUs of the largest node"),
    "submit_hosts": ("list[str]", "hostname patterns roach may submit from (fnmatch; empty: any)"),
    "refused_hosts": ("list[str]", "hostname patterns roach never submits from (a login host)"),
    "metered": ("bool", "mark the cluster metered (a metered module cannot be unmarked)"),
    "ssh_alias": ("str", "the ssh alias of its login host (clusters reached over ssh, or with rest_url: files only)"),
    "ssh_config": ("str", "an ssh config file instead of ~/.ssh/config"),
    "remote_setup": ("list[str]", "shell lines run before each remote command (e.g. module load slurm)"),
    "node_scratch": ("list[str]", "node-local directories where jobs keep <run_id>* scratch"),
    "python_env": ("python_env", "every job's Python here: uv, pixi, venv or system, over the commit's lock file"),
    "rest_url": ("str", "slurmrestd's URL (http://host:port): every Slurm call goes there (docs/rest.md)"),
    "token_command": ("list[str]", "with rest_url: the command that prints a JWT, e.g. scontrol token lifespan=3600"),
    "token_file": ("str", "with rest_url: a file of mode 600 holding the JWT (instead of token_command)"),
    "shared_fs": ("bool", "with rest_url: this machine sees the cluster's files at the same paths"),
    "tiers": ("list[table]", "where jobs land, top down: [[clusters.NAME.tiers]] tables"),
}
_REST_KEYS = ("token_command", "token_file", "shared_fs")
_TIER_KEYS: dict[str, tuple[str, str]] = {
    "name": ("str", "the tier's name (required)"),
    "partition": ("str", "the partition jobs of this tier use"),
    "qos": ("str", "the QOS jobs of this tier use"),
    "constraint": ("str", "a node constraint (--constraint)"),
    "gpu_cap": ("int", "GPUs one user may claim here, running plus pending"),
    "preemptible": ("bool", "jobs here can be preempted"),
}
_KIND_TEXT = {
    "str": "a non-empty string",
    "int": "an integer >= 0",
    "float": "a number >= 0",
    "bool": "true or false",
    "list[str]": "a list of non-empty strings",
    "list[table]": "a list of tables",
    "python_env": f"one of {', '.join(e.value for e in PythonEnv)}",
}
_TOP_KEYS = {"default": "the cluster used when none is named", "clusters": "[clusters.NAME] tables"}


def config_path() -> Path:
    """``$ROACH_CLUSTERS_TOML``, else ``$XDG_CONFIG_HOME/roach/clusters.toml`` (``~/.config`` by default)."""
    if os.environ.get("ROACH_CLUSTERS_TOML"):
        return Path(os.environ["ROACH_CLUSTERS_TOML"]).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".config"
    return base / "roach" / "clusters.toml"


@dataclass(frozen=True)
class ClusterSettings:
    """What clusters.toml says about one cluster; None / empty: not set there."""

    name: str
    values: Mapping[str, Any] = field(default_factory=dict)  # every key but tiers, validated
    tiers: tuple[Tier, ...] | None = None


@dataclass(frozen=True)
class UserConfig:
    path: Path
    exists: bool
    default: str | None = None
    clusters: Mapping[str, ClusterSettings] = field(default_factory=dict)


class ConfigError(UsageError):
    """clusters.toml cannot be used as it is."""


def _err(path: Path, where: str, problem: str, hint: str | None = None) -> ConfigError:
    return ConfigError(f"{path}: {where}: {problem}", hint=hint or "the keys are documented in docs/clusters/README.md")


def _valid_list(keys: Mapping[str, tuple[str, str]]) -> str:
    return "; ".join(f"{k} ({t}): {what}" for k, (t, what) in keys.items())


def _typed(path: Path, where: str, kind: str, value: Any) -> Any:
    ok = {
        "str": lambda v: isinstance(v, str) and v != "",
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0,
        "bool": lambda v: isinstance(v, bool),
        "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v),
        "list[table]": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
        "python_env": lambda v: v in {e.value for e in PythonEnv},
    }[kind]
    if not ok(value):
        raise _err(path, where, f"{value!r} is not {_KIND_TEXT[kind]}")
    return float(value) if kind == "float" else value


def _tier(path: Path, where: str, raw: dict[str, Any]) -> Tier:
    unknown = sorted(set(raw) - set(_TIER_KEYS))
    if unknown:
        raise _err(path, where, f"unknown key(s) {', '.join(unknown)}", hint=f"valid keys: {_valid_list(_TIER_KEYS)}")
    if "name" not in raw:
        raise _err(path, where, "a tier needs a name", hint='e.g. name = "high"')
    vals = {k: _typed(path, f"{where}.{k}", _TIER_KEYS[k][0], v) for k, v in raw.items()}
    return Tier(**vals)


def _cluster(path: Path, name: str, raw: Any) -> ClusterSettings:
    where = f"[clusters.{name}]"
    if name not in known_clusters():
        raise _err(
            path,
            where,
            f"unknown cluster {name!r}",
            hint=f"known clusters: {', '.join(known_clusters())} (a new cluster is a module and a page: "
            "docs/clusters/README.md)",
        )
    if not isinstance(raw, dict):
        raise _err(path, where, "must be a table")
    unknown = sorted(set(raw) - set(_CLUSTER_KEYS))
    if unknown:
        raise _err(
            path, where, f"unknown key(s) {', '.join(unknown)}", hint=f"valid keys: {_valid_list(_CLUSTER_KEYS)}"
        )
    values = {k: _typed(path, f"{where} {k}", _CLUSTER_KEYS[k][0], v) for k, v in raw.items()}
    tiers = None
    if "tiers" in values:
        tiers = tuple(_tier(path, f"[[clusters.{name}.tiers]] #{i + 1}", t) for i, t in enumerate(values.pop("tiers")))
        names = [t.name for t in tiers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise _err(path, f"[[clusters.{name}.tiers]]", f"tier name(s) given twice: {', '.join(dup)}")
    _check_rest(path, where, values)
    if "max_cost" in values and "gpu_hour_cost" not in values:
        raise _err(path, where, "max_cost needs gpu_hour_cost (what one GPU-hour costs) to be checked")
    return ClusterSettings(name, values, tiers)


def _check_rest(path: Path, where: str, values: Mapping[str, Any]) -> None:
    """rest_url takes exactly one token source; the REST keys need rest_url; the URL is http(s)://host[:port]."""
    if "rest_url" not in values:
        stray = [k for k in _REST_KEYS if k in values]
        if stray:
            raise _err(path, where, f"{', '.join(stray)} without rest_url", hint="add rest_url, or remove the line(s)")
        return
    url = urllib.parse.urlsplit(values["rest_url"])
    if url.scheme not in ("http", "https") or not url.hostname:
        raise _err(path, f"{where} rest_url", f"{values['rest_url']!r} is not an http:// or https:// URL")
    if ("token_command" in values) == ("token_file" in values):
        raise _err(
            path,
            where,
            "rest_url needs exactly one of token_command and token_file",
            hint='e.g. token_command = ["scontrol", "token", "lifespan=3600"], or token_file = "~/.slurm-jwt" '
            "(mode 600)",
        )
    if values.get("token_command") == []:
        raise _err(path, f"{where} token_command", "is empty", hint='e.g. ["scontrol", "token", "lifespan=3600"]')


def _toml(p: Path, text: str) -> dict[str, Any]:
    """``text``, the file ``p``, as TOML. The parser loads here, once a file exists: without one (the lab's
    user, a new machine) every command starts without it."""
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p} is not valid TOML: {e}", hint="see docs/clusters/README.md for its form") from None


def load(path: str | os.PathLike[str] | None = None) -> UserConfig:
    """Read and validate clusters.toml (a missing file is an empty configuration)."""
    p = Path(path).expanduser() if path is not None else config_path()
    try:
        text = p.read_text()
    except FileNotFoundError:
        return UserConfig(p, False)
    except OSError as e:
        raise ConfigError(
            f"cannot read {p}: {e}", hint="fix its permissions, or point $ROACH_CLUSTERS_TOML elsewhere"
        ) from e
    raw = _toml(p, text)
    unknown = sorted(set(raw) - set(_TOP_KEYS))
    if unknown:
        raise _err(
            p,
            "top level",
            f"unknown key(s) {', '.join(unknown)}",
            hint="valid: " + "; ".join(f"{k}: {v}" for k, v in _TOP_KEYS.items()),
        )
    default = raw.get("default")
    if default is not None:
        _typed(p, "default", "str", default)
        if default not in known_clusters():
            raise _err(
                p, "default", f"unknown cluster {default!r}", hint=f"known clusters: {', '.join(known_clusters())}"
            )
    clusters_raw = raw.get("clusters", {})
    if not isinstance(clusters_raw, dict):
        raise _err(p, "clusters", "must be a table of [clusters.NAME] tables")
    clusters = {name: _cluster(p, name, body) for name, body in clusters_raw.items()}
    return UserConfig(p, True, default, clusters)


def default_cluster_name(config: UserConfig | None = None) -> str:
    """The cluster a submission goes to when none is named: clusters.toml's ``default``, else ``ilc``.

    A metered cluster is never a default: it is used only when named explicitly and confirmed.
    """
    cfg = config if config is not None else load()
    name = cfg.default or BUILTIN_DEFAULT
    cluster = configured(module_cluster(name), cfg)
    if cluster.metered:
        raise ConfigError(
            f"{cfg.path}: default = {name!r} is a metered cluster; a metered cluster is never a default",
            hint=f"set default to an unmetered cluster (built-in: {BUILTIN_DEFAULT}), and name {name} with "
            "--metered (allow_metered=True) each time you mean to spend it",
        )
    return name


def configured(cluster: Cluster | str, config: UserConfig | None = None) -> Cluster:
    """The cluster with what clusters.toml says of it applied (the same object if it says nothing).

    Idempotent. A module's ``metered=True`` stays: the file may mark a cluster metered, never unmark it.
    Commands get a cluster by name with :func:`roach.fleet.userconfig.get_cluster`, which calls this.
    """
    c = cluster if isinstance(cluster, Cluster) else module_cluster(cluster)
    cfg = config if config is not None else load()
    s = cfg.clusters.get(c.name)
    if s is None:
        return c
    v = s.values
    changes: dict[str, Any] = {}
    if s.tiers is not None:
        changes["tiers"] = s.tiers
    simple = {
        "account": "default_account",
        "partition": "default_partition",
        "max_gpus": "max_gpus",
        "max_gpu_hours": "max_gpu_hours",
        "gpu_hour_cost": "gpu_hour_cost",
        "max_cost": "max_cost",
        "max_gpus_per_node": "max_gpus_per_node",
        "ssh_config": "ssh_config",
        "rest_url": "rest_url",
        "token_file": "token_file",
        "shared_fs": "shared_fs",
    }
    for key, attr in simple.items():
        if key in v:
            changes[attr] = v[key]
    if "python_env" in v:
        changes["python_env"] = PythonEnv(v["python_env"])
    for key in (
        "partitions",
        "qos_names",
        "submit_hosts",
        "refused_hosts",
        "remote_setup",
        "node_scratch",
        "token_command",
    ):
        if key in v:
            changes[key] = tuple(v[key])
    if "metered" in v:
        if not v["metered"] and c.metered:
            raise _err(
                cfg.path,
                f"[clusters.{c.name}] metered",
                f"{c.name} is metered ({c.budget or 'by its module'}); clusters.toml cannot unmark it",
                hint="remove the line",
            )
        changes["metered"] = v["metered"] or c.metered
    if "ssh_alias" in v:
        if c.ssh_alias is None and "rest_url" not in v:  # through slurmrestd an alias carries files only
            raise _err(
                cfg.path,
                f"[clusters.{c.name}] ssh_alias",
                f"{c.name} is driven from its own nodes, not over ssh",
                hint="remove the line",
            )
        changes["ssh_alias"] = v["ssh_alias"]
    own = module_cluster(c.name) if c.name in known_clusters() else None
    if own is not None and (c.ssh_alias, c.ssh_config) != (own.ssh_alias, own.ssh_config):
        # the caller already chose how to reach it (--ssh-alias, a recorded alias): that choice wins
        changes.pop("ssh_alias", None)
        changes.pop("ssh_config", None)
    return c.with_(**changes) if changes else c


def get_cluster(name: str | Cluster) -> Cluster:
    """The cluster named ``name`` as this user has it: its module with clusters.toml applied.

    The one way every command and library call gets a cluster by name, so an account, an ssh alias or a tier
    table the user configured is seen by all of them alike. An unknown name is an error that lists the known
    ones; a broken clusters.toml is an error naming the file and key. A :class:`Cluster` object is taken as
    given (whoever made it chose its values; ``configured()`` applies the file to one).
    """
    if isinstance(name, Cluster):
        return name
    return configured(module_cluster(name))


def fill_resources(cluster: Cluster, res: Resources) -> Resources:
    """``res`` with the account and partition the cluster's configuration gives, where ``res`` leaves them unset.

    A partition comes from the tier whose QOS ``res`` names, else the configured default partition.
    """
    changes: dict[str, Any] = {}
    if res.account is None and cluster.default_account:
        changes["account"] = cluster.default_account
    if res.partition is None:
        by_tier = next((t.partition for t in cluster.tiers if res.qos and t.qos == res.qos and t.partition), None)
        if by_tier or cluster.default_partition:
            changes["partition"] = by_tier or cluster.default_partition
    return res.replace(**changes) if changes else res


# -- writing a block for the user to save ----------------------------------------------------------------
def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def cluster_block(
    name: str, values: Mapping[str, Any], tiers: list[tuple[Tier, str]], comments: Sequence[str] = ()
) -> str:
    """A ``[clusters.NAME]`` block (keys, then one ``[[clusters.NAME.tiers]]`` table per tier, each with a
    comment line), in the form :func:`load` reads back."""
    lines = [f"# {c}" for c in comments]
    lines.append(f"[clusters.{name}]")
    for key, value in values.items():
        if value is not None and value != () and value != []:
            lines.append(f"{key} = {_toml_value(value)}")
    for tier, note in tiers:
        lines.append("")
        if note:
            lines.append(f"# {note}")
        lines.append(f"[[clusters.{name}.tiers]]")
        for key in ("name", "partition", "qos", "constraint", "gpu_cap", "preemptible"):
            value = getattr(tier, key)
            if value is not None and not (key == "preemptible" and value is False):
                lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def save_block(name: str, block: str, path: Path | None = None) -> Path:
    """Append ``block`` to clusters.toml; refuse if the file already configures ``name`` (edit it by hand)."""
    import tomllib

    p = path or config_path()
    cfg = load(p)
    if name in cfg.clusters:
        raise ConfigError(
            f"{p} already has [clusters.{name}]; roach does not overwrite what you wrote",
            hint="edit the file by hand with the proposal printed above, or delete that section first",
        )
    text = p.read_text() if p.exists() else ""
    p.parent.mkdir(parents=True, exist_ok=True)
    new = text + ("\n" if text and not text.endswith("\n") else "") + ("\n" if text else "") + block

    tomllib.loads(new)  # what we write must read back
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(new)
    os.replace(tmp, p)
    load(p)  # and validate
    return p
