"""Starting runs: the checks, the batch script, the shipped runtime, the one pipeline, submit, resume, sweep,
a job's handle and view, and holders with the attempts inside them (:mod:`roach.launch.hold`)."""
