"""When a pending job starts: :mod:`.starts` gives every pending job of a queue its earliest, likely and latest
start, playing the queue forward on :mod:`.timeline`'s capacity and replaying Slurm's passes (:mod:`.replay`);
:mod:`.reads` gathers what it reads in a constant number of calls. All but ``reads`` are pure."""
