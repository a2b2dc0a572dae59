"""``PlacementBoard.place_index``: the same choice as ``place``, as an index into the agent order."""

from __future__ import annotations

import random

from dl2_mesos.cluster import AgentView
from dl2_mesos.placement import PlacementBoard
from dl2_mesos.resources import Resources

DEMANDS = [Resources(2, 1, 8192), Resources(2, 0, 4096), Resources(4, 1, 12288), Resources(1, 0, 2048),
           Resources(0.5, 0, 1000.5)]


def test_place_index_chooses_like_place_and_leaves_the_same_board():
    rng = random.Random(7)
    caps = [Resources(8, 2, 49152), Resources(16, 4, 98304), Resources(4, 0, 16384)]
    ags = tuple(AgentView(f"n{i:03d}", f"n{i:03d}", c, c) for i, c in
                enumerate(rng.choice(caps) for _ in range(60)))
    by_id, by_index = PlacementBoard(ags), PlacementBoard(ags)
    placed: list[tuple[str, Resources]] = []
    failed = 0
    for _ in range(2000):
        d = rng.choice(DEMANDS)
        if placed and rng.random() < 0.2:  # free a placed task now and then
            a, r = placed.pop(rng.randrange(len(placed)))
            by_id.release(a, r)
            by_index.release(a, r)
            continue
        agent = by_id.place(d)
        i = by_index.place_index(d)
        if agent is None:
            assert i is None
            failed += 1
            continue
        placed.append((agent, d))
        assert ags[i].agent_id == agent
        assert by_index.load(agent) == by_id.load(agent) and by_index.free(agent) == by_id.free(agent)
    assert len(placed) > 100 and failed > 10, "the test both places and runs out of room"
