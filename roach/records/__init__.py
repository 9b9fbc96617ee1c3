"""What roach keeps: the SQLite store, bundles and job.json, the one record of a job's end, results."""
