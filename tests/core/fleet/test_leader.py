"""The pure rules of leader election: no server, no Trio; a model of the Lease for races."""

from __future__ import annotations

import ast
import datetime as dt
import importlib.util
import pathlib

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from kokumi.core.fleet.leader import (
    Create,
    Elector,
    LeaderElection,
    LeaseRecord,
    Lost,
    Timing,
    Update,
    Wait,
    decide,
    format_time,
    parse_record,
    spec_of,
)
from tests.support.strategies import examples

EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TIMING = Timing()


def wall(t: float) -> dt.datetime:
    return EPOCH + dt.timedelta(seconds=t)


def held_by(holder: str, seconds: int = 15, transitions: int = 0) -> LeaseRecord:
    stamp = format_time(EPOCH)
    return LeaseRecord(holder, seconds, stamp, stamp, transitions)


def test_defaults_are_client_gos() -> None:
    assert (TIMING.lease_duration, TIMING.renew_deadline, TIMING.retry_period) == (15, 10, 2)
    assert LeaderElection("me").lease_name == "kokumi-clusters"


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "words"),
    [
        (15, 15, 2, "lease duration (15 s) must be more than the renew deadline (15 s)"),
        (15, 2, 2, "renew deadline (2 s) must be more than 1.2 x the retry period (2 s)"),
        (15, 10, 0, "retry period must be more than 0 s"),
    ],
)
def test_timing_that_could_let_two_lead_is_refused(
    lease: float, renew: float, retry: float, words: str
) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Timing(lease, renew, retry)


def test_a_fractional_lease_duration_is_rounded_up() -> None:
    assert Timing(10.5, 10, 2).lease_seconds == 11


def test_time_is_written_as_the_api_server_writes_micro_time() -> None:
    assert format_time(wall(1.25)) == "2026-01-01T00:00:01.250000Z"
    later = dt.datetime(2026, 1, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert format_time(later) == "2026-01-01T00:00:00.000000Z"


records = st.builds(
    LeaseRecord,
    holder=st.text(min_size=0, max_size=20),
    duration_seconds=st.integers(0, 3600),
    acquire_time=st.none() | st.just(format_time(EPOCH)),
    renew_time=st.none() | st.just(format_time(EPOCH)),
    transitions=st.integers(0, 10_000),
)


@given(records)
def test_a_record_survives_the_round_trip_through_a_spec(record: LeaseRecord) -> None:
    assert parse_record(spec_of(record)) == record


def test_a_spec_with_missing_or_mistyped_fields_reads_as_free() -> None:
    assert parse_record(None) == LeaseRecord()
    odd = {"holderIdentity": 3, "leaseDurationSeconds": True, "leaseTransitions": "2"}
    assert parse_record(odd) == LeaseRecord()


def test_without_a_lease_the_candidate_creates_one_and_writes_a_renew_deadline_later() -> None:
    elector = Elector("a", TIMING).observe(None, "", now=5.0)
    decision = decide(elector, 5.0, wall(5))
    assert decision == Create(LeaseRecord("a", 15, format_time(wall(5)), format_time(wall(5)), 0))
    created = elector.wrote(decision.record, "1", started=5.0, created=True)
    assert created.leading and not created.may_write(14.9)
    # Renewals keep the hold: whoever wrote for a Lease deleted before the create has stopped
    # by its renew deadline, at most 10 s after the create.
    renewed = created.wrote(decision.record, "2", started=14.0)
    assert not renewed.may_write(14.9)
    assert renewed.may_write(15.0)
    # A Lease taken over (not created) is written for at once.
    taken = Elector("b", TIMING).wrote(held_by("b"), "3", started=5.0)
    assert taken.may_write(5.0)
    assert not taken.stepped_down().may_write(5.0)


def test_a_leader_that_finds_its_lease_deleted_stops_without_writing() -> None:
    """client-go creates the Lease again and goes on leading; a standby may have created it
    first and lead meanwhile. Here the leader stops at once, and stands again as anybody."""
    elector = Elector("a", TIMING).wrote(held_by("a"), "5", started=10.0)
    gone = elector.observe(None, "", now=12.0)
    lost = decide(gone, 12.0, wall(12))
    assert lost == Lost("")
    assert lost.why("kokumi/kokumi-clusters") == "the Lease kokumi/kokumi-clusters was deleted"
    assert Lost("b").why("x/y") == "the Lease x/y is held by b"
    assert isinstance(decide(gone.stepped_down(), 12.0, wall(12)), Create)


def test_a_standby_waits_out_the_lease_on_its_own_clock_not_the_renew_time() -> None:
    # The Lease's renewTime says the epoch, hours before the wall clock; only the moment this
    # candidate saw the record change counts.
    elector = Elector("b", TIMING).observe(held_by("a"), "7", now=100.0)
    assert decide(elector, 114.9, wall(99_999)) == Wait("a", 115.0)
    # Reading the same record again does not restart the clock.
    elector = elector.observe(held_by("a"), "7", now=110.0)
    taken = decide(elector, 115.0, wall(99_999))
    assert isinstance(taken, Update)
    assert taken.resource_version == "7"
    assert (taken.record.holder, taken.record.transitions) == ("b", 1)
    # A renewal (a changed record) does restart it.
    elector = elector.observe(attrs.evolve(held_by("a"), renew_time="x"), "8", now=112.0)
    assert decide(elector, 126.9, wall(0)) == Wait("a", 127.0)


def test_a_lease_handed_back_is_taken_at_once() -> None:
    handed_back = LeaseRecord("", 1, format_time(EPOCH), format_time(EPOCH), 4)
    elector = Elector("b", TIMING).observe(handed_back, "9", now=50.0)
    decision = decide(elector, 50.0, wall(50))
    assert isinstance(decision, Update)
    assert decision.record == LeaseRecord("b", 15, format_time(wall(50)), format_time(wall(50)), 5)


def test_a_leader_renews_keeping_its_acquire_time_and_transitions() -> None:
    elector = Elector("a", TIMING).wrote(held_by("a", transitions=3), "5", started=10.0)
    assert elector.leading
    assert elector.stop_by() == 20.0
    decision = decide(elector, 12.0, wall(12))
    assert isinstance(decision, Update)
    assert decision.record == LeaseRecord("a", 15, format_time(EPOCH), format_time(wall(12)), 3)


def test_a_leader_that_sees_another_holder_steps_down_without_writing() -> None:
    elector = Elector("a", TIMING).wrote(held_by("a"), "5", started=10.0)
    elector = elector.observe(held_by("b"), "6", now=30.0)
    assert decide(elector, 30.0, wall(30)) == Lost("b")


def test_release_hands_back_only_what_the_candidate_holds() -> None:
    leading = Elector("a", TIMING).wrote(held_by("a", transitions=2), "5", started=10.0)
    released = leading.release(wall(11))
    stamp = format_time(wall(11))
    assert released == LeaseRecord("", 1, stamp, stamp, 2)
    assert spec_of(released)["holderIdentity"] == ""
    standby = Elector("b", TIMING).observe(held_by("a"), "5", now=10.0)
    assert standby.release(wall(11)) is None
    assert Elector("c", TIMING).release(wall(11)) is None


@attrs.define
class Pending:
    """A candidate's attempt between its read and its write: the write may land much later."""

    decision: Create | Update
    started: float


class ElectionModel(RuleBasedStateMachine):
    """Candidates racing for one Lease on a server that checks resourceVersions.

    Reads and writes interleave freely, writes may land long after their read, candidates
    crash and come back, time jumps, the Lease is deleted. Whatever happens, no two candidates
    may both believe they can write at the same moment: "may write" is leading and before the
    renew deadline.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.lease: LeaseRecord | None = None
        self.version = 0
        self.electors: dict[str, Elector] = {}
        self.pending: dict[str, Pending] = {}
        self.writes = 0

    @initialize()
    def start(self) -> None:
        self.electors = {name: Elector(name, TIMING) for name in ("c0", "c1", "c2")}

    names = st.sampled_from(["c0", "c1", "c2"])

    @rule(seconds=st.sampled_from([0.0, 1.0, 2.0, 5.0, 10.0, 15.0]) | st.floats(0.0, 20.0))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @rule(name=names)
    def read(self, name: str) -> None:
        if name not in self.electors or name in self.pending:
            return
        elector = self.electors[name].observe(self.lease, str(self.version), self.now)
        decision = decide(elector, self.now, wall(self.now))
        if isinstance(decision, Lost):
            elector = elector.stepped_down()
        elif isinstance(decision, Create | Update):
            self.pending[name] = Pending(decision, self.now)
        self.electors[name] = elector

    @rule(name=names)
    def write_lands(self, name: str) -> None:
        pending = self.pending.pop(name, None)
        if pending is None:
            return
        decision = pending.decision
        if isinstance(decision, Create):
            if self.lease is not None:
                return  # AlreadyExists
        elif self.lease is None or decision.resource_version != str(self.version):
            return  # Conflict
        self.lease = decision.record
        self.version += 1
        self.writes += 1
        self.electors[name] = self.electors[name].wrote(
            decision.record,
            str(self.version),
            pending.started,
            created=isinstance(decision, Create),
        )

    @rule(name=names)
    def write_fails(self, name: str) -> None:
        self.pending.pop(name, None)

    @rule()
    def lease_deleted(self) -> None:
        """Somebody deletes the Lease (kubectl, a namespace cleanup) while a leader writes."""
        self.lease = None
        self.version += 1

    @rule(name=names)
    def crash_and_restart(self, name: str) -> None:
        if name in self.electors:
            self.pending.pop(name, None)
            self.electors[name] = Elector(name, TIMING)

    @rule(name=names)
    def stop_cleanly(self, name: str) -> None:
        elector = self.electors.get(name)
        if elector is None or not self.may_write(elector):
            return
        released = elector.release(wall(self.now))
        self.pending.pop(name, None)
        self.electors[name] = elector.stepped_down()
        if released is not None and self.lease is not None and self.lease.holder == name:
            self.lease = released
            self.version += 1

    def may_write(self, elector: Elector) -> bool:
        return elector.may_write(self.now)

    @invariant()
    def at_most_one_may_write(self) -> None:
        writers = [n for n, e in self.electors.items() if self.may_write(e)]
        assert len(writers) <= 1, (writers, self.now, self.lease)

    @invariant()
    def a_writer_is_the_holder(self) -> None:
        for name, elector in self.electors.items():
            # Deleted since its last write, it learns so at its next read.
            if self.may_write(elector) and self.lease is not None:
                assert self.lease.holder == name


ElectionModel.TestCase.settings = settings(max_examples=examples(500), stateful_step_count=40)
TestElectionModel = ElectionModel.TestCase


@pytest.mark.parametrize(
    "module",
    [
        pytest.param("kokumi.core.fleet.leader", id="leader"),
        pytest.param("kokumi.core.cluster.availability", id="availability"),
    ],
)
def test_the_pure_modules_import_no_io(module: str) -> None:
    """Decisions stay testable without a server: no Trio, no HTTP, no kube client."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    source = pathlib.Path(spec.origin).read_text()
    names = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
        if not (isinstance(node, ast.ImportFrom) and node.level)
    }
    # The pure core's own modules are pure too (import-linter holds the core apart from I/O).
    imported = {name.split(".")[0] for name in names if not name.startswith("kokumi.core.")}
    assert imported <= {"__future__", "attrs", "collections", "datetime", "math", "typing"}
