"""Slurm's REST API, the third way to a cluster: :class:`~.client.RestClient`, a ``SlurmClient`` whose reads and
writes are requests to slurmrestd (docs/rest.md). :mod:`.request` sends one, :mod:`.token` finds the JWT,
:mod:`.jobs` and :mod:`.site` read the answers as the commands' records, :mod:`.job_description` turns a batch
script into what ``POST .../job/submit`` takes."""
