"""roach.runtime: the job side, the only roach code a rank loads and the only code a submit ships.

The rank entry (:mod:`~roach.runtime.rank`, started as ``python -m roach.slurm.run SPEC``), the ``Run``
a function receives (:mod:`~roach.runtime.context`), the checkpoint signals (:mod:`~roach.runtime.signals`),
``resume.pt`` (:mod:`~roach.runtime.checkpoint`), what a rank does when its run must leave and the run's
attempt bookkeeping (:mod:`~roach.runtime.attempts`), and ``node.sh``, the clone protocol every node runs.

Its modules import only ``roach.runtime.*``, ``roach.model.*``, ``roach.errors``, ``roach._fs`` and the
standard library (torch lazily, where a rank has it). docs/architecture.md says why and what is shipped.
"""
