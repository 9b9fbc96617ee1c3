"""The site cache: a submit's guardrail reads the nodes and partitions once per few minutes, and never refuses
on what it cached (on recorded 22.05 output of the lab, through the public MockTransport)."""

from __future__ import annotations

from pathlib import Path

import pytest

from roach.fleet.guardrails import Refused, check_live
from roach.model.resources import Resources
from roach.scheduler.client import SlurmClient
from roach.scheduler.mock_transport import MockTransport
from roach.scheduler.site_cache import SiteCache
from roach.slurm.clusters.lab import LAB

DATA = Path(__file__).parent / "data" / "22.05"
SINFO = (DATA / "sinfo_nodes_idle.txt").read_text()
PARTITIONS = (DATA / "scontrol_show_partition.txt").read_text()
GPU1 = Resources(gpus_per_node=1, cpus_per_gpu=1, time="00:10:00", partition="gpu")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _client(tmp_path: Path, clock: Clock, partitions: str = PARTITIONS) -> tuple[SlurmClient, MockTransport]:
    t = MockTransport({"sinfo": SINFO, ("scontrol", "show", "partition"): partitions})
    return SlurmClient(t, site_cache=SiteCache("lab test", directory=tmp_path, clock=clock)), t


def _asked(t: MockTransport) -> list[str]:
    return [c.argv[0] for c in t.calls]


def test_the_second_submit_within_the_age_asks_slurm_nothing(tmp_path):
    clock = Clock()
    first, t1 = _client(tmp_path, clock)
    check_live(LAB, GPU1, first)
    assert _asked(t1) == ["sinfo", "scontrol"]
    again, t2 = _client(tmp_path, clock)  # another process: the file is what carries over
    clock.now += 599
    check_live(LAB, GPU1, again)
    assert _asked(t2) == []
    clock.now += 2  # past the age: read again
    later, t3 = _client(tmp_path, clock)
    check_live(LAB, GPU1, later)
    assert _asked(t3) == ["sinfo", "scontrol"]


def test_a_refusal_is_made_on_what_slurm_says_now_never_on_the_cache(tmp_path):
    clock = Clock()
    old = PARTITIONS.replace("PartitionName=gpu ", "PartitionName=gpu-old ")
    stale, _ = _client(tmp_path, clock, partitions=old)
    with pytest.raises(Refused, match="partition 'gpu' does not exist"):
        check_live(LAB, GPU1, stale)  # cached: gpu-old only
    now, t = _client(tmp_path, clock)  # the admin renamed it back: the cache still says gpu-old
    check_live(LAB, GPU1, now)
    assert _asked(t) == ["sinfo", "scontrol"]  # the cached refusal was checked against Slurm, which accepts
    with pytest.raises(Refused, match="partition 'nopart' does not exist"):
        check_live(LAB, GPU1.replace(partition="nopart"), now)


def test_a_broken_or_foreign_cache_file_is_read_again(tmp_path):
    clock = Clock()
    cache = SiteCache("lab test", directory=tmp_path, clock=clock)
    cache.put("nodes", "text")
    assert cache.get("nodes") == "text"
    cache.path.write_text("{not json")
    assert cache.get("nodes") is None
    other = SiteCache("another lab", directory=tmp_path, clock=clock)
    other.put("nodes", "theirs")
    assert SiteCache("lab test", directory=tmp_path, clock=clock).get("nodes") is None
    assert other.path != cache.path


def test_a_client_without_a_cache_always_asks(tmp_path):
    t = MockTransport({"sinfo": SINFO, ("scontrol", "show", "partition"): PARTITIONS})
    client = SlurmClient(t)
    for _ in range(2):
        check_live(LAB, GPU1, client)
    assert _asked(t) == ["sinfo", "scontrol"] * 2
