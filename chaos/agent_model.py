"""The agent's scripted model: which writes an attempt makes, in what order, spelled how.

The order of a phase's writes, whether they go at once, and how their JSON is spelled change
from attempt to attempt, as a model's would; what the writes are does not. Now and then the
model reads back an artifact or a thread it wrote, and an artifact must hold what it wrote.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor

from actonce_api.v1 import run_actions_pb2 as pb

from chaos.agent_tools import AgentTools
from chaos.plan_writes import Op, OpKind, render_json
from chaos.run_result import ALREADY_APPLIED, APPLIED, SKIPPED
from chaos.sidecar_api import AttemptFailed


class AgentModel(AgentTools):
    """The agent's scripted model: an attempt's writes, phase by phase."""

    def _phase(
        self, attempt: str, phase: tuple[Op, ...], known: dict[int, str], rng: random.Random
    ) -> None:
        ops = list(phase)
        rng.shuffle(ops)
        workers = rng.choice((1, 1, 2, 4))
        # Each write gets its own generator, seeded here, so that threads do not race on one.
        seeds = [rng.random() for _ in ops]
        found: dict[int, str] = {}
        if workers == 1:
            for op, s in zip(ops, seeds, strict=True):
                found.update(self._op(attempt, op, known, random.Random(s)))
        else:
            with ThreadPoolExecutor(workers) as pool:
                futures = [
                    pool.submit(self._op, attempt, op, known, random.Random(s))
                    for op, s in zip(ops, seeds, strict=True)
                ]
                first: AttemptFailed | None = None
                for future in futures:
                    try:
                        found.update(future.result())
                    except AttemptFailed as failed:
                        first = first or failed
                if first is not None:
                    raise first
        known.update(found)

    def _op(
        self, attempt: str, op: Op, known: dict[int, str], rng: random.Random
    ) -> dict[int, str]:
        request_id = f"{attempt[-8:]}:{op.index}"
        if op.kind in (OpKind.CREATE, OpKind.PROPOSE_CREATE):
            propose = op.kind is OpKind.PROPOSE_CREATE
            created = self._write(
                self._create,
                pb.CreateRequest(
                    attempt_id=attempt,
                    kind=op.artifact_kind,
                    data_json=render_json(op.data, rng),
                    propose=propose,
                    request_id=request_id,
                ),
                op,
                rng,
            )
            self._expect(op, created.outcome, (APPLIED, ALREADY_APPLIED))
            self._ack(attempt, op, "Create", created.id, created.outcome, created.version)
            return {} if propose else {op.index: created.id}
        if op.kind in (OpKind.EDIT, OpKind.PROPOSE_EDIT):
            propose = op.kind is OpKind.PROPOSE_EDIT
            artifact_id = known[op.target]
            edited = self._write(
                self._edit,
                pb.EditRequest(
                    attempt_id=attempt,
                    artifact_id=artifact_id,
                    path=op.path,
                    value_json=render_json(op.value, rng),
                    propose=propose,
                    request_id=request_id,
                ),
                op,
                rng,
            )
            allowed = (APPLIED, ALREADY_APPLIED) if propose else (APPLIED, SKIPPED)
            self._expect(op, edited.outcome, allowed)
            self._ack(
                attempt,
                op,
                "Edit",
                edited.proposal_id,
                edited.outcome,
                edited.version,
                artifact_id=artifact_id,
                path=op.path,
            )
            return {}
        if op.kind is OpKind.THREAD:
            thread = self._write(
                self._thread,
                pb.CreateThreadRequest(attempt_id=attempt, title=op.title, request_id=request_id),
                op,
                rng,
            )
            self._expect(op, thread.outcome, (APPLIED, ALREADY_APPLIED))
            self._ack(attempt, op, "CreateThread", thread.thread_id, thread.outcome)
            return {op.index: thread.thread_id}
        if op.kind in (OpKind.NOTICE, OpKind.SEND):
            if op.kind is OpKind.NOTICE:
                posted: pb.NoticeResponse | pb.SendResponse = self._write(
                    self._notice,
                    pb.NoticeRequest(
                        attempt_id=attempt,
                        thread_id=known[op.target],
                        text=op.text,
                        request_id=request_id,
                    ),
                    op,
                    rng,
                )
            else:
                posted = self._write(
                    self._send,
                    pb.SendRequest(
                        attempt_id=attempt,
                        thread_id=known[op.target],
                        text=op.text,
                        request_id=request_id,
                    ),
                    op,
                    rng,
                )
            self._expect(op, posted.outcome, (APPLIED, ALREADY_APPLIED))
            rpc = "Notice" if op.kind is OpKind.NOTICE else "Send"
            self._ack(attempt, op, rpc, posted.message_id, posted.outcome)
            return {}
        if op.kind is OpKind.GATEWAY:
            self._charge(attempt, op, rng, request_id)
            return {}
        self._step(attempt, op, rng, request_id)
        return {}

    def _read_back(self, attempt: str, known: dict[int, str], rng: random.Random) -> None:
        if not known:
            return
        index = rng.choice(sorted(known))
        target = known[index]
        request = (
            pb.ReadRequest(attempt_id=attempt, thread_id=target)
            if target.startswith("thr_")
            else pb.ReadRequest(attempt_id=attempt, artifact_id=target)
        )
        answer = self._call(self._read, request)
        if target.startswith("art_"):
            op = next(op for op in self.plan.ops() if op.index == index)
            data = json.loads(answer.artifact.data_json)
            if answer.artifact.id != target or data.get("body") != op.data["body"]:
                self._violation(f"Read of {target} answered another artifact's data")
