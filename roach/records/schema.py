"""The store's SQLite schema: the jobs table at :data:`SCHEMA_VERSION` and the steps of the migration ladder
that climbs an older file to it (``Store`` runs them), the watch's state and the experiments' names."""

from __future__ import annotations

SCHEMA_VERSION = 4


SCHEMA = """
CREATE TABLE jobs (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,  -- insertion order: breaks same-second ties
    cluster      TEXT    NOT NULL,
    job_id       INTEGER NOT NULL,
    run_id       TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    target       TEXT    NOT NULL,
    "commit"     TEXT    NOT NULL,
    repo         TEXT    NOT NULL,
    log_path     TEXT    NOT NULL,
    bundle_dir   TEXT    NOT NULL,
    run_dir      TEXT    NOT NULL,
    submitted_at TEXT    NOT NULL,
    resources    TEXT    NOT NULL,  -- JSON object
    status       TEXT    NOT NULL,
    slurm_state  TEXT,
    exit_code    TEXT,
    recorded_at  TEXT,
    holder       INTEGER,
    task         INTEGER,  -- the array task index of a sweep's run, NULL for a plain job
    via          TEXT,     -- the SSH alias it was submitted through when not the cluster's own, else NULL
    via_config   TEXT,     -- the ssh config file that alias was taken from (NULL: ssh's default)
    job_json_at  TEXT      -- when job.json on the cluster was last written with the recorded end (NULL: not yet)
);
CREATE UNIQUE INDEX jobs_key ON jobs (cluster, job_id, IFNULL(task, -1));
CREATE INDEX jobs_run ON jobs (run_id, seq);
CREATE INDEX jobs_job ON jobs (job_id);
"""


# The watcher's tables (see Store.watch_load): its view of each job, and its other state, as JSON.
WATCH_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS watch_jobs (
        cluster TEXT NOT NULL,
        key     TEXT NOT NULL,  -- the job as squeue names it: 123 or 123_4
        data    TEXT NOT NULL,  -- JSON object
        PRIMARY KEY (cluster, key))""",
    """CREATE TABLE IF NOT EXISTS watch_meta (
        cluster TEXT NOT NULL,
        key     TEXT NOT NULL,
        value   TEXT NOT NULL,  -- JSON
        PRIMARY KEY (cluster, key))""",
)


EXPERIMENTS_SCHEMA = """CREATE TABLE IF NOT EXISTS experiments (
    cluster    TEXT    NOT NULL,
    job_id     INTEGER NOT NULL,
    experiment TEXT    NOT NULL,
    PRIMARY KEY (cluster, job_id))"""


# Version 1 had no task/via columns and UNIQUE(cluster, job_id) inline, which SQLite cannot alter: the
# table is rebuilt in place (one transaction), keeping every row and its seq. Version 2 lacked via_config,
# version 3 job_json_at: its final rows then have NULL there, so `roach ls`/`status` write their job.json.
MIGRATE_1_TO_2 = (
    "ALTER TABLE jobs RENAME TO jobs_v1",
    "DROP INDEX IF EXISTS jobs_run",
    "DROP INDEX IF EXISTS jobs_job",
    *filter(str.strip, SCHEMA.split(";")),
    'INSERT INTO jobs (seq, cluster, job_id, run_id, name, target, "commit", repo, log_path, bundle_dir, run_dir,'
    " submitted_at, resources, status, slurm_state, exit_code, recorded_at, holder)"
    ' SELECT seq, cluster, job_id, run_id, name, target, "commit", repo, log_path, bundle_dir, run_dir,'
    " submitted_at, resources, status, slurm_state, exit_code, recorded_at, holder FROM jobs_v1",
    "DROP TABLE jobs_v1",
)


MIGRATE_3_TO_4 = ("ALTER TABLE jobs ADD COLUMN job_json_at TEXT",)


MIGRATE_2_TO_4 = ("ALTER TABLE jobs ADD COLUMN via_config TEXT", *MIGRATE_3_TO_4)
