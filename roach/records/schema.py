"""The store's SQLite schema: the jobs table at :data:`SCHEMA_VERSION` and the steps of the migration ladder
that climbs an older file to it (``Store`` runs them), the watch's state and the experiments' names."""

from __future__ import annotations

SCHEMA_VERSION = 6


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
    job_json_at  TEXT,     -- when job.json on the cluster was last written with the recorded end (NULL: not yet)
    attempt      INTEGER,  -- an attempt's number inside its holder (job_id is the holder's), NULL otherwise
    kind         TEXT    NOT NULL DEFAULT 'job',  -- job, task, holder or attempt (roach.model.ids.RecordKind)
    error_line   TEXT     -- a failed job's cause, the line of its log that says it (NULL: none found or not failed)
);
CREATE UNIQUE INDEX jobs_key ON jobs (cluster, job_id, IFNULL(task, -1), IFNULL(attempt, -1));
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


# Version 4 told the kinds apart by the shape of a row: an attempt had job id (n << 32) | holder, a holder
# holder == job_id, a sweep's run a task. Version 5 says it in `kind` and keeps an attempt's number in
# `attempt`, its job id the holder's. The key gains the attempt before the ids are split (they would collide).
KINDS_FROM_IDS = (
    "UPDATE jobs SET kind='attempt', attempt=job_id >> 32, job_id=job_id & 4294967295 WHERE job_id >= 4294967296",
    "UPDATE jobs SET kind='task' WHERE task IS NOT NULL",
    "UPDATE jobs SET kind='holder' WHERE kind='job' AND (holder=job_id OR target='roach:hold')",
)

MIGRATE_4_TO_5 = (
    "ALTER TABLE jobs ADD COLUMN attempt INTEGER",
    "ALTER TABLE jobs ADD COLUMN kind TEXT NOT NULL DEFAULT 'job'",
    "DROP INDEX jobs_key",
    "CREATE UNIQUE INDEX jobs_key ON jobs (cluster, job_id, IFNULL(task, -1), IFNULL(attempt, -1))",
    *KINDS_FROM_IDS,
)

# Version 6 keeps a failed job's error line; the ends recorded before it have none.
MIGRATE_5_TO_6 = ("ALTER TABLE jobs ADD COLUMN error_line TEXT",)

MIGRATE_4_TO_6 = (*MIGRATE_4_TO_5, *MIGRATE_5_TO_6)

MIGRATE_3_TO_6 = ("ALTER TABLE jobs ADD COLUMN job_json_at TEXT", *MIGRATE_4_TO_6)

MIGRATE_2_TO_6 = ("ALTER TABLE jobs ADD COLUMN via_config TEXT", *MIGRATE_3_TO_6)

# each older version's steps to the latest (version 1 is rebuilt as the latest table, then its kinds set)
MIGRATIONS = {
    1: (*MIGRATE_1_TO_2, *KINDS_FROM_IDS),
    2: MIGRATE_2_TO_6,
    3: MIGRATE_3_TO_6,
    4: MIGRATE_4_TO_6,
    5: MIGRATE_5_TO_6,
}
