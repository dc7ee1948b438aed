/** Deliveries, steps, per-call deadlines and cancellation, against a live sidecar (Node 20). */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { status } from "@grpc/grpc-js";

import {
  ActonceError,
  Client,
  deliver,
  type Delivery,
  type Effect,
  MODEL_TURN,
  ModelResponseTooLarge,
  notSent,
  Parked,
  runToolCall,
} from "../src/index.js";
import { retryPolicy } from "../src/langgraph.js";
import { liveSidecar } from "./sidecar.js";
import { startTestkit } from "./testkit.js";

const live = liveSidecar();

const RULE = "deliveries";
const runId = () => `run-${randomUUID()}`;
const JSON_CODEC = { encode: (v: unknown) => v, decode: (v: unknown) => v };

describe("deliveries", () => {
  test("a model turn is recorded once and replayed by a later delivery, keyed by what was asked", async () => {
    const run = runId();
    let asked = 0;
    const ask = async () => ({ toolCalls: [{ id: `call_${++asked}` }] });
    const turn = (key: Record<string, unknown>) =>
      deliver(live.client, { runId: run, rule: RULE }, (d) => d.turn(key, ask, JSON_CODEC));
    const first = await turn({ model: "m", turn: 0 });
    assert.deepEqual(await turn({ model: "m", turn: 0 }), first);
    assert.equal(asked, 1);
    assert.notDeepEqual(await turn({ model: "m", turn: 1 }), first);
    assert.equal(asked, 2);
  });

  test("a turn too large to record is refused before anything acts on it, and asked again later", async () => {
    const run = runId();
    const big = async () => "x".repeat(1 << 20);
    const once = () => deliver(live.client, { runId: run, rule: RULE }, (d) => d.turn({ turn: 0 }, big, JSON_CODEC));
    await assert.rejects(once(), (e: unknown) => e instanceof ModelResponseTooLarge && e.refused);
    // The step was aborted, not left begun: the turn is asked again, and refused again.
    await assert.rejects(once(), ModelResponseTooLarge);
    assert.equal(MODEL_TURN, "model_turn");
  });

  test("a newer delivery fences an older one's tool calls; the older ends quietly", async () => {
    const run = runId();
    let older: Delivery | undefined;
    let resume!: () => void;
    const paused = new Promise<void>((done) => (resume = done));
    let thread = "";
    const first = deliver(live.client, { runId: run, rule: RULE }, async (d) => {
      older = d;
      thread = (await d.attempt.createThread("fences")).id;
      await paused;
      return runToolCall("call_1", (call) => call.attempt.notice(thread, "late"));
    });
    while (older === undefined || thread === "") await new Promise((r) => setTimeout(r, 10));
    const newer = await deliver(live.client, { runId: run, rule: RULE }, async () =>
      runToolCall("call_1", (call) => call.attempt.notice(thread, "on time")),
    );
    assert.ok(!(newer instanceof Parked));
    assert.equal(newer.outcome, "APPLIED");
    resume();
    await assert.rejects(first, (e: unknown) => e instanceof ActonceError && e.reason === "ATTEMPT_FENCED");
  });

  test("a fenced tool call is not tried again, by runToolCall nor by LangGraph's retry policy: the delivery ends fenced", async () => {
    const run = runId();
    let begins = 0;
    let tries = 0;
    const fenced = deliver(live.client, { runId: run, rule: RULE }, (d) => {
      const beginTool = d.beginTool.bind(d);
      d.beginTool = (...args) => {
        begins++;
        return beginTool(...args);
      };
      return runToolCall(
        "call_1",
        async (call) => {
          tries++;
          // A newer delivery of the run begins: this one, and its tool calls, are fenced.
          await (await live.client.begin({ runId: run, rule: RULE })).end();
          return call.attempt.create("ticket", { title: "late" });
        },
        { retries: 2 },
      );
    });
    const error = await fenced.then(
      (answer) => assert.fail(`not fenced: ${String(answer)}`),
      (thrown: unknown) => thrown,
    );
    assert.ok(error instanceof ActonceError && error.reason === "ATTEMPT_FENCED" && error.retryable, String(error));
    assert.deepEqual([begins, tries], [1, 1], "a fenced tool call was tried again");
    const policy = retryPolicy();
    assert.equal(policy.retryOn(error), false, "LangGraph's retry policy retries a fence");
    const unknownAttempt = new ActonceError("gone", status.NOT_FOUND, "UNKNOWN_ATTEMPT", "RETRYABLE");
    assert.equal(policy.retryOn(unknownAttempt), true);
  });

  test("a step with a bad effect ends the delivery with the caller's error: nothing was sent, nothing parks", async () => {
    let calls = 0;
    const answer = deliver(live.client, { runId: runId(), rule: RULE }, () =>
      runToolCall("call_1", (call) =>
        call.step("charge", { cents: 5 }, async () => ++calls, { effect: "WRITE" as unknown as Effect }),
      ),
    );
    await assert.rejects(
      answer,
      (e: unknown) => e instanceof ActonceError && e.reason === "INVALID_ARGUMENT" && e.permanent,
    );
    assert.equal(calls, 0);
  });

  test("a step known not sent is aborted and made by the next try; one that may have acted parks", async () => {
    const run = runId();
    let calls = 0;
    const refused = Object.assign(new TypeError("fetch failed"), {
      cause: Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }),
    });
    assert.ok(notSent(refused));
    const charge = (fail: unknown) =>
      deliver(live.client, { runId: run, rule: RULE }, () =>
        runToolCall("call_1", (call) =>
          call.step("charge", { cents: 5 }, async (key) => {
            calls++;
            if (fail !== undefined) throw fail;
            return key;
          }),
        ),
      );
    await assert.rejects(charge(refused), TypeError);
    await assert.rejects(charge(new Error("connection reset")), /connection reset/);
    const parked = await charge(undefined);
    assert.ok(parked instanceof Parked);
    assert.deepEqual(
      parked.items.map((i) => [i.reason, i.tool]),
      [["IN_DOUBT", "charge"]],
    );
    assert.equal(calls, 2, "the charge was made a third time");
  });

  test("a refusal is the tool's to hand back; a retryable error is tried again", async () => {
    const run = runId();
    let tries = 0;
    const made = await deliver(live.client, { runId: run, rule: RULE }, () =>
      runToolCall(
        "call_1",
        async (call) => {
          tries++;
          if (tries === 1) await call.attempt.end(); // the next write: UNKNOWN_ATTEMPT, retryable
          return call.attempt.create("ticket", { title: "once" });
        },
        { retries: 1 },
      ),
    );
    assert.ok(!(made instanceof Parked));
    assert.equal(tries, 2);
    const refused = deliver(live.client, { runId: run, rule: RULE }, async () => {
      await runToolCall("call_2", (call) => call.attempt.readArtifact("art_aaaaaaaaaaaaaaaaaaaaaaaaaa")).catch(
        (e: unknown) => e,
      );
      return "went on";
    });
    assert.equal(await refused, "went on", "a refusal does not end the delivery");
  });

  test("the heartbeat moves the delivery's lease, and a lost lease aborts the delivery's signal", async () => {
    const run = runId();
    const soon = () => new Date(Math.floor(Date.now() / 1000) * 1000 + 60_000);
    let beats = 0;
    const result = await deliver(
      live.client,
      { runId: run, rule: RULE, leaseDeadline: soon(), heartbeatEveryMs: 20, heartbeat: () => (beats++ < 2 ? soon() : undefined) },
      async (d) => {
        await new Promise<void>((done) => d.signal.addEventListener("abort", () => done(), { once: true }));
        return String(d.signal.reason);
      },
    );
    assert.match(String(result), /lease is not extended/);
    assert.equal(beats, 3);
  });
});

describe("per-call bounds", () => {
  test("a call cancelled before it is sent rejects at once, and one in flight is cancelled", async () => {
    const attempt = await live.client.begin({ runId: runId(), rule: RULE });
    const stop = new AbortController();
    stop.abort();
    await assert.rejects(
      attempt.create("ticket", {}, { signal: stop.signal }),
      (e: unknown) => e instanceof ActonceError && e.reason === "CANCELLED" && e.unknown,
    );
    const proxy = await startTestkit("holding_proxy.py", live.sidecar.target);
    const held = new Client(proxy.target);
    try {
      const late = await held.begin({ runId: runId(), rule: RULE });
      assert.equal(await proxy.command("hold"), "held");
      const cancel = new AbortController();
      const write = late.create("ticket", { title: "held" }, { signal: cancel.signal });
      setTimeout(() => cancel.abort(), 200);
      // The caller's own cancel: the outcome is unknown, and it is not the transport's to retry.
      await assert.rejects(write, (e: unknown) => e instanceof ActonceError && e.reason === "CANCELLED" && e.unknown);
      // The proxy lets go once it reads the cancelled call's reset: hold again after that.
      while ((await proxy.command("given-up")) !== "1") await new Promise((r) => setTimeout(r, 20));
      assert.equal(await proxy.command("hold"), "held");
      await assert.rejects(
        late.create("ticket", { title: "held too" }, { timeoutMs: 300 }),
        (e: unknown) => e instanceof ActonceError && e.reason === "DEADLINE_EXCEEDED" && e.retryable,
      );
    } finally {
      held.close();
      await proxy.stop();
    }
  });
});
