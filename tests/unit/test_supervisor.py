"""The supervisor's choice of the job that probably killed a worker process."""
from worker.supervisor import Supervisor


def row(name, crashes=0, other_ends=0):
    return {"id": name, "crashes": crashes, "other_ends": other_ends}


def test_the_only_job_running_is_the_suspect():
    assert Supervisor.suspects([row("a")]) == [row("a")]


def test_a_first_crash_with_several_jobs_blames_none():
    assert Supervisor.suspects([row("a"), row("b")]) == []


def test_the_job_found_in_an_earlier_crash_is_the_suspect():
    assert Supervisor.suspects([row("a", crashes=1), row("b")]) == [row("a", crashes=1)]


def test_a_job_that_ended_otherwise_before_is_not_blamed():
    assert Supervisor.suspects([row("a", crashes=1, other_ends=1), row("b")]) == []


def test_a_tie_blames_none_until_it_persists():
    assert Supervisor.suspects([row("a", crashes=1), row("b", crashes=1)]) == []
    assert Supervisor.suspects([row("a", crashes=2), row("b", crashes=2)]) == []
    assert Supervisor.suspects([row("a", crashes=3), row("b", crashes=3)]) == [row("a", crashes=3), row("b", crashes=3)]
    assert Supervisor.suspects([row("a", crashes=2), row("b", crashes=1)]) == [row("a", crashes=2)]
