"""Ports are handed out round-robin per agent, so a just-released port is not reused at once."""

from __future__ import annotations

from dl2_mesos.framework.offer_book import AgentOffers, OfferClaim
from dl2_mesos.resources import Resources

ONE = Resources(1, 0, 1)


def _agent(agent_id: str) -> AgentOffers:
    return AgentOffers(agent_id, "h", free=Resources(8, 2, 1000), ports=[(100, 104), (200, 201)])


def test_ports_continue_after_the_last_one_handed_out_and_wrap():
    a = _agent("rot-a")
    first = OfferClaim(a).take(ONE, 2)
    second = OfferClaim(a).take(ONE, 2)  # a new round on the same offers: no reuse of 100, 101
    assert first == [100, 101]
    assert second == [102, 103]
    third = OfferClaim(a).take(ONE, 4)
    assert third == [104, 200, 201, 100]


def test_ports_within_one_claim_are_distinct_and_exhaustion_changes_nothing():
    a = _agent("rot-b")
    claim = OfferClaim(a)
    got = claim.take(ONE, 5) + claim.take(ONE, 2)
    assert sorted(got) == [100, 101, 102, 103, 104, 200, 201]
    free_before = claim.free
    assert claim.take(ONE, 1) is None
    assert claim.free == free_before


def test_agents_rotate_independently():
    a, b = _agent("rot-c"), _agent("rot-d")
    assert OfferClaim(a).take(ONE, 3) == [100, 101, 102]
    assert OfferClaim(b).take(ONE, 1) == [100]
