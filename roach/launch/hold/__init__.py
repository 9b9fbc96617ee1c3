"""Holders: an allocation queued once and kept, and the attempts that run inside it as its steps (docs/hold.md).

``hold()`` (:mod:`.start`) queues a holder through the pipeline every batch job takes; :class:`~.holder.Holder`
is its handle and :class:`~.holder.InsideJob` an attempt's; :mod:`.attempt_start` starts an attempt,
:mod:`.scripts` renders the holder's and an attempt's scripts, :mod:`.steps` and :mod:`.attempts` read what
Slurm and an attempt's bundle say (``roach ls`` loads only these two). It is part of launching: ``submit(...,
inside=H)`` starts an attempt, and a job's view (:mod:`roach.launch.job_view`) reads attempts' ends.
"""
