"""A Pydantic AI agent on actonce, its worker killed with SIGKILL after each of its
writes and as each of its model calls starts, and the run delivered again: every write
is in the store once, and every charge is made once by the card processor.

Pydantic AI's real Agent with a FunctionModel scripted as a real model answers (fresh
tool-call ids, shuffled parallel calls, reworded texts), its requests durable model
turns, sync and async tools, a streamed run, against a real `actonce serve`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import scenarios
from kill_loop import World, check_every_kill, world_of

from actonce_client.testing import LocalSidecar

pytestmark = pytest.mark.timeout(180)

EXPECTED = scenarios.PYDANTIC_AI


@pytest.fixture(scope="module")
def world(sidecar: LocalSidecar, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with world_of(sidecar, tmp_path_factory.mktemp("pydantic"), "pydantic_ai_worker") as world:
        yield world


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_write_once_whichever_write_or_model_call_the_worker_is_killed_at(
    world: World, scenario: str
) -> None:
    assert check_every_kill(world, scenario, EXPECTED[scenario]) > 0
