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
    kind         TEXT    NOT NULL DEFAULT 'job'  -- job, task, holder or attempt (roach.model.ids.RecordKind)
);
CREATE UNIQUE INDEX jobs_key ON jobs (cluster, job_id, IFNULL(task, -1), IFNULL(attempt, -1));
CREATE INDEX jobs_run ON jobs (run_id, seq);
CREATE INDEX jobs_job ON jobs (job_id);
