"""Starting runs: the batch script, the shipped runtime, the repo and clone protocol, submit, resume, sweep, Job, attempts inside a holder."""
