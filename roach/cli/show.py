"""``roach status``: one job's state (``ls``, the store's recent jobs, is :mod:`roach.cli.listing`).

Apart from ``logs`` and ``cancel`` (:mod:`roach.cli.inspect`), which act through a job's handle: ``status`` and
``ls`` only read the store and ask Slurm, and load no more than that (issue 18: each starts in under 150 ms with
10,000 records in the store). ``tests/test_cli_imports.py`` checks what they load. A job's view is
:func:`~roach.launch.job_view.reconcile`'s, the function :meth:`Job.status() <roach.launch.job.Job.status>` calls:
``status --json`` is that view as JSON.
"""

from __future__ import annotations

import click

from roach.cli.common import echo_json as _echo_json
from roach.cli.common import json_option, run_as_option, ssh_config_option
from roach.cli.refs import cluster_option, explained, record_of_ref, ssh_alias_option
from roach.cli.view_text import print_view
from roach.cli.views import job_json
from roach.launch.job_view import reconcile
from roach.ops.fleet_views import reach
from roach.records.store import Store
from roach.records.workspace_job import is_workspace_record
from roach.workspace.stage import archived_bundle, earlier_stage_error


@click.command()
@click.argument("ref", metavar="RUN_OR_JOB")
@cluster_option
@run_as_option
@ssh_alias_option
@ssh_config_option
@json_option
def status(
    ref: str, cluster: str | None, run_as: str | None, ssh_alias: str | None, ssh_config: str | None, as_json: bool
) -> None:
    """Show the state of one job (a run id names its latest job)."""
    with Store() as store:
        rec = record_of_ref(ref, cluster, store)
        reached = reach(rec, run_as=run_as, ssh_alias=ssh_alias, ssh_config=ssh_config)
        with explained(rec, ssh_alias):
            (view,) = reconcile(reached.client(), [rec], store, whole_queue=False).views
    stage = earlier_stage(rec)
    if as_json:
        _echo_json(job_json(view, **({"earlier_stage": stage} if stage else {})))
    else:
        print_view(view)
        if stage:
            click.echo(f"note: {stage}", err=True)


def earlier_stage(rec) -> str | None:
    """For a remote-workspace job whose stage is over (NeuriCo archived its bundle): where the bundle went."""
    if not is_workspace_record(rec):
        return None
    archived = archived_bundle(rec.resources.get("workspace") or "", str(rec.job_id))
    return (
        None if archived is None else earlier_stage_error(rec.resources["workspace"], str(rec.job_id), archived).message
    )
