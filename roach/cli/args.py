"""Parsing what the job commands take: KEY=VALUE arguments and their JSON form, --env, and the cluster a command names."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import click

from roach.fleet.cluster import Cluster, with_ssh_override
from roach.fleet.userconfig import default_cluster_name, get_cluster


# -- parsing --------------------------------------------------------------------------------------------
def parse_arg_value(text: str) -> Any:
    """A ``--arg`` value: JSON when it parses (``1e-3``, ``200``, ``["a","b"]``, ``true``), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def key_values(param: str, values: Iterable[str], form: str) -> list[tuple[str, str]]:
    pairs = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not of the form {form}", param_hint=param)
        pairs.append((key, value))
    return pairs


def parse_args(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in key_values("--arg", values, "KEY=VALUE (e.g. --arg lr=1e-3)"):
        if not key.isidentifier():
            raise click.BadParameter(f"{key!r} is not a keyword argument name", param_hint="--arg")
        if key in out:
            raise click.BadParameter(f"{key!r} is given twice", param_hint="--arg")
        out[key] = parse_arg_value(value)
    return out


def parse_args_json(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        data = json.loads(value)
    except ValueError as e:
        raise click.BadParameter(f"not JSON ({e}): {value!r}", param_hint="--args-json") from None
    if not isinstance(data, dict):
        raise click.BadParameter(
            f"must be a JSON object of keyword arguments, got {type(data).__name__}", param_hint="--args-json"
        )
    return data


def parse_env(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    return dict(key_values("--env", values, "NAME=VALUE (e.g. --env WANDB_MODE=offline)"))


def cli_cluster(name: str, run_as: str | None) -> Cluster:
    c = get_cluster(name)
    return c.with_(run_as=run_as) if run_as else c


def submit_cluster(
    cluster: str | None, run_as: str | None, ssh_alias: str | None, ssh_config: str | None
) -> Cluster | None:
    """The cluster a submission goes to, reached through ``ssh_alias``/``ssh_config`` when given (None: the
    configured default, chosen by submit itself)."""
    if cluster is None and (ssh_alias or ssh_config):
        cluster = default_cluster_name()
    return with_ssh_override(cli_cluster(cluster, run_as), ssh_alias, ssh_config) if cluster else None
