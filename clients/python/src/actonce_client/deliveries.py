"""One delivery of a queue's job: an unscoped attempt of its run, the model turns it
records, the tool calls that belong to it, and what parks it.

A queue delivers a job at least once: a worker that dies, or whose lease (the queue's
visibility timeout) runs out, has the job delivered again. Each delivery begins an
unscoped attempt of the job's run (``run_id``), and every tool call of the delivery
begins a scoped attempt that names it (``delivery_attempt_id``). Beginning a newer
delivery fences the older one's tool calls in the sidecar's ledger, so a worker that
lost its lease, however late it wakes, writes nothing; the delivery's lease bounds its
tool calls' leases, and a heartbeat moves it while the agent thinks.

**Durable model turns.** A model names its tool calls anew on every call, so a delivery
that asked the model again would make new tool calls, and every write they make would
be a new write. Each model response is recorded as a step of the delivery's attempt
(tool ``model_turn``, keyed by which model and a digest of what it was asked:
:mod:`actonce_client.model_turns`, docs/model-turns.md), and a later delivery that asks
the same request replays the recorded response instead of asking again: the same tool
calls, with the same ids, so the same writes, found once, whatever order parallel
requests come in. A response is recorded before anything acts on it; one whose JSON form exceeds
what the sidecar keeps (``MAX_RECORDED_BYTES``, the limit of a step's ``result_json``)
is refused, :class:`ModelResponseTooLarge`, before it reaches the framework.

**Parked.** A run with an item in doubt (a non-idempotent step that began and may have
acted, ``IN_DOUBT``; a write whose audit could not be stored) fails the same way on
every delivery until a person decides it (``actonce audit pending``, ``actonce audit
resolve``). The integrations' ``deliver`` answers it with :class:`Parked`, naming the
items, so the worker parks or dead-letters the job instead of retrying it forever; once
resolved, the next delivery goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from actonce_client import inputs
from actonce_client.aio import AsyncAttempt, AsyncClient
from actonce_client.client import Attempt, Client, Effect, RawJSON
from actonce_client.errors import ActonceError, FailureClass, InvalidInput
from actonce_client.model_turns import ModelTurn

T = TypeVar("T")

MODEL_TURN = "model_turn"
"""The tool name a delivery records its model turns under."""
MAX_RECORDED_BYTES = inputs.MAX_JSON_BYTES
"""The largest model response a turn records, as UTF-8 JSON text: 1 MiB, the sidecar's
limit for a step's ``result_json`` (nested at most 64 levels deep)."""
TOOLS_SETTLE_SECONDS = 30.0
"""Seconds a delivery that is done waits at most for its tool calls still running."""

_current: contextvars.ContextVar[Delivery | None] = contextvars.ContextVar(
    "actonce_delivery", default=None
)


class ModelResponseTooLarge(InvalidInput):
    """A model response larger than a turn can record: refused before anything acts on it."""


@dataclass(frozen=True)
class ParkedItem:
    """What needs a person: a step or write of the run (its id), and why."""

    id: str
    tool: str
    reason: str
    message: str


@dataclass(frozen=True)
class Parked:
    """A delivery that stopped on items in doubt: park or dead-letter the job, and deliver
    it again once ``actonce audit resolve`` decided each item."""

    run_id: str
    items: tuple[ParkedItem, ...]


def parked_item(error: ActonceError) -> ParkedItem | None:
    """The item an UNKNOWN error leaves to a person, or None for any other error."""
    if error.failure_class is not FailureClass.UNKNOWN:
        return None
    item = error.metadata.get("step_id") or error.metadata.get("derived_id") or error.request_id
    return ParkedItem(item, error.metadata.get("tool", ""), error.reason, error.message)


def actonce_cause(error: BaseException) -> ActonceError | None:
    """The ActonceError a framework's error carries (raised, its cause or context, or in a
    group), or None."""
    seen: set[int] = set()
    stack = [error]
    while stack:
        found = stack.pop()
        if id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, ActonceError):
            return found
        if isinstance(found, BaseExceptionGroup):
            stack.extend(found.exceptions)
        stack.extend(e for e in (found.__cause__, found.__context__) if e is not None)
    return None


@dataclass(frozen=True)
class Codec(Generic[T]):
    """How a framework's model response is recorded as JSON, and read back."""

    encode: Callable[[T], Any]
    decode: Callable[[Any], T]


def recordable(response: Any) -> str:
    """A model response's JSON text as a turn records it; ModelResponseTooLarge if it is
    beyond what the sidecar keeps."""
    text = json.dumps(response, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_RECORDED_BYTES:
        raise ModelResponseTooLarge(
            "result_json",
            f"the model's response is {size} bytes as JSON; a recorded model turn holds at "
            f"most {MAX_RECORDED_BYTES}: refused before anything acted on it",
        )
    try:
        inputs.canonical_json(text, "result_json")
    except InvalidInput as refused:
        raise ModelResponseTooLarge("result_json", refused.message) from None
    return text


class Heartbeat:
    """Moves the delivery's lease while the agent thinks: every ``every`` seconds it asks
    ``extend`` (which extends the queue's lease, the visibility timeout) for the new
    deadline, and moves the delivery's lease to it. ``extend`` answering None, or
    failing, stops it: the queue's lease then runs out, and so does the sidecar's."""

    def __init__(
        self, attempt: Attempt, extend: Callable[[], datetime | None], every: float
    ) -> None:
        self._attempt = attempt
        self._extend = extend
        self._every = every
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="actonce-heartbeat", daemon=True)
        self.beats = 0
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _beat(self) -> None:
        while not self._stopped.wait(self._every):
            try:
                deadline = self._extend()
                if deadline is None:
                    return
                self._attempt.extend_lease(deadline)
            except Exception as error:  # the lease then runs out, which fences the delivery
                self.error = error
                return
            self.beats += 1


@dataclass
class Delivery:
    """One delivery of a run: its attempt, its model turns, its tool calls' attempts.

    Made by an integration's ``deliver``; a tool or model wrapper finds the delivery it
    runs in with :func:`current`.
    """

    client: Client
    attempt: Attempt
    # Without a framework checkpointer the tool calls' ids are only as stable as the model
    # turns that named them: a tool call before any recorded turn is refused.
    needs_turns: bool = False
    turns: int = 0
    in_doubt: list[ParkedItem] = field(default_factory=list)
    _aclients: dict[int, AsyncClient] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _tools_running: int = field(default=0, repr=False)
    _tools_done: threading.Condition = field(default_factory=threading.Condition, repr=False)
    # The recorded answer each caller had for each request (ModelTurn: a node retry): a
    # caller named by a string (a LangGraph task's id) for the delivery, a task while it lives.
    _answered: dict[str, dict[Hashable, Any]] = field(default_factory=dict, repr=False)
    _answered_by_task: weakref.WeakKeyDictionary[Any, dict[Hashable, Any]] = field(
        default_factory=weakref.WeakKeyDictionary, repr=False
    )
    # The models whose positional keys of an earlier client ended in this delivery.
    _legacy_ended: set[str] = field(default_factory=set, repr=False)

    @property
    def run_id(self) -> str:
        return self.attempt.run_id

    @property
    def rule(self) -> str:
        return self.attempt.rule

    # -- model turns --------------------------------------------------------------------

    def turn(self, turn: ModelTurn, call: Callable[[], T], codec: Codec[T]) -> T:
        """The model's response to ``turn``'s request: the one this caller already had, or
        the one recorded, or asked for and recorded (:class:`ModelTurn` says which)."""
        mine = self._mine(turn)
        if mine is not None:
            return codec.decode(mine)
        begun = self.attempt.begin_step(MODEL_TURN, Effect.IDEMPOTENT_WRITE, dict(turn.key))
        self._counted()
        if begun.done:
            return codec.decode(self._keep(turn, begun.result))
        earlier = self._legacy(turn)
        try:
            text = recordable(earlier if earlier is not _NONE else codec.encode(call()))
        except Exception:
            # A model that did not answer, or an answer refused, acted on nothing.
            self.attempt.abort_step(begun.id, "the model's answer was not recorded")
            raise
        self.attempt.end_step(begun.id, RawJSON(text))
        return codec.decode(self._keep(turn, json.loads(text)))

    async def aturn(self, turn: ModelTurn, call: Callable[[], Awaitable[T]], codec: Codec[T]) -> T:
        """:meth:`turn`, awaited."""
        mine = self._mine(turn)
        if mine is not None:
            return codec.decode(mine)
        attempt = self.async_attempt()
        begun = await attempt.begin_step(MODEL_TURN, Effect.IDEMPOTENT_WRITE, dict(turn.key))
        self._counted()
        if begun.done:
            return codec.decode(self._keep(turn, begun.result))
        earlier = await self._alegacy(turn)
        try:
            text = recordable(earlier if earlier is not _NONE else codec.encode(await call()))
        except Exception:
            await attempt.abort_step(begun.id, "the model's answer was not recorded")
            raise
        await attempt.end_step(begun.id, RawJSON(text))
        return codec.decode(self._keep(turn, json.loads(text)))

    def _mine(self, turn: ModelTurn) -> Any:
        """The recorded answer this turn's caller already had for this request, or None."""
        if turn.caller is None:
            return None
        with self._lock:
            return self._callers(turn.caller).get(turn.caller, {}).get(_frozen(turn.key))

    def _keep(self, turn: ModelTurn, recorded: Any) -> Any:
        if turn.caller is not None:
            with self._lock:
                callers = self._callers(turn.caller)
                callers.setdefault(turn.caller, {})[_frozen(turn.key)] = recorded
        return recorded

    def _callers(self, caller: Hashable) -> Any:
        return self._answered if isinstance(caller, str) else self._answered_by_task

    def _legacy(self, turn: ModelTurn) -> Any:
        """The answer an earlier client recorded for this turn under its positional key,
        or _NONE. Looked for until the first position of a model found empty: the old
        keys of a model are recorded in order, so none lies past it, and a run begun
        after the upgrade pays one look per model and delivery."""
        if not self._looks_for_legacy(turn):
            return _NONE
        assert turn.legacy is not None
        begun = self.attempt.begin_step(MODEL_TURN, Effect.IDEMPOTENT_WRITE, dict(turn.legacy))
        if begun.done:
            return begun.result
        self.attempt.abort_step(begun.id, "no turn was recorded under this position")
        self._no_legacy(turn)
        return _NONE

    async def _alegacy(self, turn: ModelTurn) -> Any:
        if not self._looks_for_legacy(turn):
            return _NONE
        assert turn.legacy is not None
        attempt = self.async_attempt()
        begun = await attempt.begin_step(MODEL_TURN, Effect.IDEMPOTENT_WRITE, dict(turn.legacy))
        if begun.done:
            return begun.result
        await attempt.abort_step(begun.id, "no turn was recorded under this position")
        self._no_legacy(turn)
        return _NONE

    def _looks_for_legacy(self, turn: ModelTurn) -> bool:
        with self._lock:
            return turn.legacy is not None and turn.family not in self._legacy_ended

    def _no_legacy(self, turn: ModelTurn) -> None:
        with self._lock:
            self._legacy_ended.add(turn.family)

    def _counted(self) -> None:
        with self._lock:
            self.turns += 1

    # -- tool calls ---------------------------------------------------------------------

    def begin_tool(
        self, client: Client, scope: str, checkpoint: str = "",
        lease_deadline: datetime | None = None,
    ) -> Attempt:  # fmt: skip
        """The attempt of one try of a tool call of this delivery."""
        self.require_turns()
        return client.begin(self.run_id, self.rule, checkpoint, scope=scope,
                            delivery_attempt_id=self.attempt.id,
                            lease_deadline=lease_deadline,
                            capability=self.attempt.capability)  # fmt: skip

    async def abegin_tool(
        self, scope: str, checkpoint: str = "", lease_deadline: datetime | None = None
    ) -> AsyncAttempt:
        """:meth:`begin_tool`, awaited, on this event loop's client."""
        self.require_turns()
        return await self.async_client().begin(
            self.run_id, self.rule, checkpoint, scope=scope,
            delivery_attempt_id=self.attempt.id, lease_deadline=lease_deadline,
            capability=self.attempt.capability,
        )  # fmt: skip

    @contextmanager
    def tool_running(self) -> Iterator[None]:
        """Around one tool call of this delivery: the delivery ends only once it did."""
        with self._tools_done:
            self._tools_running += 1
        try:
            yield
        finally:
            with self._tools_done:
                self._tools_running -= 1
                self._tools_done.notify_all()

    def wait_for_tools(self, seconds: float = TOOLS_SETTLE_SECONDS) -> bool:
        """Wait until no tool call of this delivery is running, ``seconds`` at most.

        A framework that stops a run at one tool call's error (a sibling in doubt) may
        leave the others running, in threads or tasks it no longer awaits: their steps,
        which may have acted, end before the delivery does, or a later delivery would
        find them in doubt."""
        with self._tools_done:
            return self._tools_done.wait_for(lambda: self._tools_running == 0, seconds)

    def require_turns(self) -> None:
        """Refuse a tool call that no recorded model turn named, where ids need one."""
        if self.needs_turns and self.turns == 0:
            raise RuntimeError(
                "a tool call before any recorded model turn, in a graph without a "
                "checkpointer: its id is new on every delivery, and so would be its writes. "
                "Call the model through actonce's durable_model(), or compile the graph "
                "with a durable checkpointer"
            )

    def saw(self, error: BaseException) -> None:
        """Note an error a tool call raised: an item in doubt parks the delivery."""
        cause = actonce_cause(error)
        item = parked_item(cause) if cause is not None else None
        if item is not None:
            with self._lock:
                if item not in self.in_doubt:
                    self.in_doubt.append(item)

    def parked(self, error: BaseException | None = None) -> Parked | None:
        """The delivery's Parked answer if an item is in doubt (``error``'s too), else None."""
        if error is not None:
            self.saw(error)
        with self._lock:
            items = tuple(self.in_doubt)
        return Parked(self.run_id, items) if items else None

    # -- the asyncio side ---------------------------------------------------------------

    def async_client(self) -> AsyncClient:
        """This event loop's client to the delivery's sidecar."""
        loop = id(asyncio.get_running_loop())
        with self._lock:
            found = self._aclients.get(loop)
            if found is None:
                found = self._aclients[loop] = AsyncClient.like(self.client)
            return found

    def async_attempt(self) -> AsyncAttempt:
        """The delivery's attempt, on this event loop's client."""
        a = self.attempt
        return self.async_client().attempt(a.id, run_id=a.run_id, rule=a.rule,
                                           checkpoint=a.checkpoint,
                                           id_scheme_version=a.id_scheme_version,
                                           capability=a.capability)  # fmt: skip

    async def aclose(self) -> None:
        """Close the asyncio clients made on the running loop."""
        loop = id(asyncio.get_running_loop())
        with self._lock:
            found = self._aclients.pop(loop, None)
        if found is not None:
            await found.close()


_NONE: Any = object()  # no answer recorded under a legacy key


def _frozen(key: Mapping[str, Any]) -> Hashable:
    return json.dumps(dict(key), sort_keys=True)


def current() -> Delivery | None:
    """The delivery the calling code runs in, if any."""
    return _current.get()


def every_default(lease_deadline: datetime) -> float:
    """A heartbeat's period: a third of the lease left, so two beats may fail in time."""
    return max((lease_deadline - datetime.now(UTC)).total_seconds() / 3, 0.05)


@dataclass(frozen=True)
class Lease:
    """The queue's lease on a delivery: when it ends, and the worker's heartbeat that
    extends it (answering the new deadline, or None once the queue took the job back),
    called every ``every`` seconds (default: a third of the lease left)."""

    deadline: datetime | None = None
    heartbeat: Callable[[], datetime | None] | None = None
    every: float | None = None

    def __post_init__(self) -> None:
        if self.heartbeat is not None and self.deadline is None:
            raise ValueError("a heartbeat extends a lease: give the lease_deadline it extends")

    def beating(self, attempt: Attempt) -> Heartbeat | None:
        if self.heartbeat is None or self.deadline is None:
            return None
        beat = Heartbeat(attempt, self.heartbeat, self.every or every_default(self.deadline))
        beat.start()
        return beat


def _handed(given: Attempt, run_id: str, rule: str) -> Attempt:
    """The delivery's attempt a harness began and handed over, checked against the run."""
    if (given.run_id, given.rule, given.scope) != (run_id, rule, ""):
        raise ValueError(
            f"the attempt handed over is of run {given.run_id!r} (rule {given.rule!r}, scope "
            f"{given.scope!r}): a delivery of run {run_id!r} needs an unscoped attempt of it"
        )
    return given


@contextmanager
def delivering(
    client: Client,
    run_id: str,
    rule: str,
    lease: Lease,
    *,
    needs_turns: bool = False,
    attempt: Attempt | None = None,
) -> Iterator[Delivery]:
    """Begin a delivery of ``run_id`` and run the code inside it: its tools' attempts name
    it, its model turns are recorded in it, and the lease's heartbeat moves its lease
    meanwhile. The delivery's attempt ends when the code is done (a fenced delivery's end
    is refused, and left: the newer delivery goes on).

    ``attempt`` is the delivery's attempt when a harness began it and handed it over (its
    id and capability: ``client.attempt(...)``): an agent that holds no API token, only
    that attempt's capability, delivers in it and begins its tool calls under it."""
    if attempt is not None:
        attempt = _handed(attempt, run_id, rule)
    else:
        attempt = client.begin(run_id, rule, "", lease_deadline=lease.deadline)
    delivery = Delivery(client, attempt, needs_turns=needs_turns)
    beating = lease.beating(attempt)
    token = _current.set(delivery)
    try:
        yield delivery
    finally:
        _current.reset(token)
        delivery.wait_for_tools()
        if beating is not None:
            beating.stop()
        with suppress(ActonceError):
            attempt.end()


@asynccontextmanager
async def adelivering(
    client: Client,
    run_id: str,
    rule: str,
    lease: Lease,
    *,
    needs_turns: bool = False,
    attempt: Attempt | None = None,
) -> AsyncIterator[Delivery]:
    """:func:`delivering` for asyncio code: its calls are awaited on this loop's client."""
    aclient = AsyncClient.like(client)
    if attempt is not None:
        handed = _handed(attempt, run_id, rule)
        begun = aclient.attempt(handed.id, run_id=run_id, rule=rule,
                                id_scheme_version=handed.id_scheme_version,
                                capability=handed.capability)  # fmt: skip
    else:
        begun = await aclient.begin(run_id, rule, "", lease_deadline=lease.deadline)
    attempt = client.attempt(begun.id, run_id=run_id, rule=rule,
                             id_scheme_version=begun.id_scheme_version,
                             capability=begun.capability)  # fmt: skip
    delivery = Delivery(client, attempt, needs_turns=needs_turns)
    delivery._aclients[id(asyncio.get_running_loop())] = aclient
    beating = lease.beating(attempt)
    token = _current.set(delivery)
    try:
        yield delivery
    finally:
        _current.reset(token)
        # In another thread: the loop meanwhile runs the tool calls that are its tasks.
        await asyncio.to_thread(delivery.wait_for_tools)
        if beating is not None:
            await asyncio.to_thread(beating.stop)
        with suppress(ActonceError):
            await begun.end()
        await delivery.aclose()
