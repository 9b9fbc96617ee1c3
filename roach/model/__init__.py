"""roach.model: pure data shared by the layers (no I/O, no imports outside the standard library and roach.errors).

Only what the job side needs lives here so far: :class:`~roach.model.job_state.JobState`.
"""
