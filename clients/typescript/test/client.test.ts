import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { status } from "@grpc/grpc-js";

import { type Attempt, type Effect, ids, rawJson, type Write } from "../src/index.js";
import { liveSidecar, rejection, SEND_RULE } from "./sidecar.js";

const live = liveSidecar();

const runId = () => `run-${randomUUID()}`;

/** One run's writes; the retry test makes them again. */
async function writeAll(attempt: Attempt): Promise<Record<string, Write>> {
  const thread = await attempt.createThread("Incident 7");
  const ticket = await attempt.create("ticket", { title: "Disk full", severity: 2 });
  const edit = await attempt.edit(ticket.id, "/status", "open");
  const notice = await attempt.notice(thread.id, `Filed ${ticket.id}`);
  const send = await attempt.send(thread.id, `Please look at ${ticket.id}`);
  return { thread, ticket, edit, notice, send };
}

describe("against a live sidecar", () => {
  test("writes apply", async () => {
    const run = { runId: runId(), rule: SEND_RULE, checkpoint: "cp-1" };
    const attempt = await live.client.begin(run);
    const written = await writeAll(attempt);
    for (const [name, write] of Object.entries(written)) assert.equal(write.outcome, "APPLIED", name);

    // The sidecar's id is the one the scheme derives.
    const identity = ids.createIdentity("ticket", '{"severity":2,"title":"Disk full"}');
    assert.equal(written["ticket"]!.id, ids.deriveId("create", run.runId, "cp-1", identity, 0));

    const artifact = await attempt.readArtifact(written["ticket"]!.id);
    assert.deepEqual(artifact.data, { title: "Disk full", severity: 2, status: "open" });
    assert.equal(artifact.version, written["edit"]!.version);
    const messages = await attempt.readThread(written["thread"]!.id);
    assert.deepEqual(
      messages.map((m) => [m.kind, m.id]),
      [
        ["notice", written["notice"]!.id],
        ["message", written["send"]!.id],
      ],
    );

    const step = await attempt.beginStep("send_email", "IDEMPOTENT_WRITE", { to: "ops@example.com" });
    assert.equal(step.done, false);
    assert.equal(await attempt.endStep(step.id, { sent: true }), "APPLIED");
    const lease = new Date(Math.floor(Date.now() / 1000) * 1000 + 3_600_000);
    assert.equal((await attempt.extendLease(lease)).getTime(), lease.getTime());
    // Five writes, and the step: its end is not another write.
    assert.deepEqual(await attempt.end(), { applied: 6, alreadyApplied: 0, skipped: 0, failed: 0 });
  });

  test("a step's effect that is none of Effect's names is refused before it is sent", async () => {
    const attempt = await live.client.begin({ runId: runId(), rule: SEND_RULE });
    for (const effect of ["WRITE", "", undefined, 1, "toString"]) {
      // As untyped JavaScript would call it.
      const error = await rejection(attempt.beginStep("t", effect as unknown as Effect, { a: 1 }));
      assert.deepEqual(
        [error.code, error.reason, error.failureClass, error.violations.map((v) => v.field)],
        [status.INVALID_ARGUMENT, "INVALID_ARGUMENT", "PERMANENT", ["effect"]],
        String(effect),
      );
      assert.match(error.message, /must be one of READ_ONLY, IDEMPOTENT_WRITE, NON_IDEMPOTENT_WRITE/);
    }
    // Nothing was sent: the step begins now, as new.
    const step = await attempt.beginStep("t", "NON_IDEMPOTENT_WRITE", { a: 1 });
    assert.deepEqual([step.outcome, step.done], ["APPLIED", false]);
    await attempt.endStep(step.id, null);
    await attempt.end();
  });

  test("a retried attempt gets the same ids, already applied", async () => {
    const run = { runId: runId(), rule: SEND_RULE, checkpoint: "cp-1" };
    const first = await writeAll(await live.client.begin(run));
    // The first attempt dies without ending; the run is retried from its checkpoint.
    const retry = await live.client.begin(run);
    const again = await writeAll(retry);
    for (const [name, write] of Object.entries(again)) {
      assert.equal(write.id, first[name]!.id, name);
      assert.equal(write.outcome, name === "edit" ? "SKIPPED" : "ALREADY_APPLIED", name);
    }
    assert.equal((await retry.readThread(first["thread"]!.id)).length, 2);
    assert.deepEqual(await retry.end(), { applied: 0, alreadyApplied: 4, skipped: 1, failed: 0 });
  });

  test("scoped attempts keep their own ids and do not fence each other", async () => {
    const run = { runId: runId(), rule: "scopes", checkpoint: "cp-1" };
    const thread = await (await live.client.begin(run)).createThread("Tool calls");
    const calls = [
      await live.client.begin({ ...run, scope: "call_1" }),
      await live.client.begin({ ...run, scope: "call_2" }),
    ];
    const posted: Write[] = [];
    for (const attempt of calls) {
      assert.deepEqual(attempt.idScheme, { version: ids.SCHEME_VERSION, scope: attempt.run.scope });
      const write = await attempt.notice(thread.id, "Charged.");
      const identity = ids.postIdentity(thread.id, "Charged.");
      assert.equal(write.outcome, "APPLIED");
      assert.equal(write.id, ids.deriveId("notice", run.runId, run.checkpoint, identity, 0, attempt.idScheme));
      posted.push(write);
    }
    assert.notEqual(posted[0]!.id, posted[1]!.id);
    // A new attempt of call_1 fences the older one only.
    const newer = await live.client.begin({ ...run, scope: "call_1" });
    assert.equal((await rejection(calls[0]!.notice(thread.id, "late"))).reason, "ATTEMPT_FENCED");
    assert.equal((await calls[1]!.notice(thread.id, "still on")).outcome, "APPLIED");
    assert.equal((await newer.notice(thread.id, "Charged.")).id, posted[0]!.id);
  });

  test("a newer delivery fences the tool calls of an older one", async () => {
    const run = { runId: runId(), rule: "deliveries" };
    const older = await live.client.begin(run);
    const thread = await older.createThread("Deliveries");
    const toolCall = await live.client.begin({ ...run, scope: "call_1", deliveryAttemptId: older.id });
    assert.equal((await toolCall.notice(thread.id, "before the redelivery")).outcome, "APPLIED");
    await live.client.begin(run); // the queue delivers the job again
    // The older delivery's tool call is another scope than the newer delivery's, yet fenced.
    assert.equal((await rejection(toolCall.notice(thread.id, "late"))).reason, "ATTEMPT_FENCED");
    const unscoped = live.client.begin({ ...run, deliveryAttemptId: older.id });
    assert.equal((await rejection(unscoped)).reason, "INVALID_ARGUMENT");
  });

  test("an aborted step runs in a later attempt", async () => {
    const run = { runId: runId(), rule: "steps" };
    const first = await live.client.begin(run);
    const step = await first.beginStep("charge_card", "NON_IDEMPOTENT_WRITE", { amount: 10 });
    assert.equal(await first.abortStep(step.id, "connection refused"), "APPLIED");
    assert.equal((await rejection(first.endStep(step.id, { charged: true }))).reason, "STEP_ABORTED");
    const retry = await live.client.begin(run);
    const again = await retry.beginStep("charge_card", "NON_IDEMPOTENT_WRITE", { amount: 10 });
    assert.equal(again.id, step.id);
    assert.equal(again.done, false);
    await retry.endStep(again.id, { charged: true });
    assert.equal((await rejection(retry.abortStep(again.id, "too late"))).reason, "STEP_ENDED");
  });

  test("invalid JSON is refused", async () => {
    const attempt = await live.client.begin({ runId: runId(), rule: "refusals" });
    const error = await rejection(attempt.create("ticket", rawJson("{")));
    assert.equal(error.code, status.INVALID_ARGUMENT);
    assert.equal(error.reason, "INVALID_ARGUMENT");
    assert.equal(error.failureClass, "REFUSED");
    assert.deepEqual([error.refused, error.retryable, error.permanent, error.unknown], [true, false, false, false]);
    assert.deepEqual(
      error.violations.map((v) => v.field),
      ["data_json"],
    );
  });

  test("send off the allowlist is permanent", async () => {
    const attempt = await live.client.begin({ runId: runId(), rule: "not-a-sender" });
    const thread = await attempt.createThread("Refusals");
    const error = await rejection(attempt.send(thread.id, "may I?"));
    assert.deepEqual([error.reason, error.failureClass, error.code], ["FORBIDDEN", "PERMANENT", status.PERMISSION_DENIED]);
    assert.ok(error.permanent);
  });

  test("an ended attempt is unknown to the sidecar, and retryable", async () => {
    const attempt = await live.client.begin({ runId: runId(), rule: "refusals" });
    await attempt.end();
    const error = await rejection(attempt.create("ticket", {}));
    assert.equal(error.reason, "UNKNOWN_ATTEMPT");
    assert.ok(error.retryable);
  });

  test("request_id replay", async () => {
    const attempt = await live.client.begin({ runId: runId(), rule: "replay" });
    const first = await attempt.create("ticket", { title: "once" }, { requestId: "req-1" });
    assert.deepEqual(await attempt.create("ticket", { title: "once" }, { requestId: "req-1" }), first);
    // Without the same request_id the same data is a second, distinct write.
    const second = await attempt.create("ticket", { title: "once" });
    assert.notEqual(second.id, first.id);
    assert.equal(second.outcome, "APPLIED");
    const misuse = await rejection(attempt.create("ticket", { title: "other" }, { requestId: "req-1" }));
    assert.deepEqual(
      misuse.violations.map((v) => v.field),
      ["request_id"],
    );
    assert.equal((await attempt.end()).applied, 2); // a replay is not a write
  });

  test("a request_id's limit is 512 bytes in any text", async () => {
    const attempt = await live.client.begin({ runId: runId(), rule: "limits" });
    const atTheLimit = "é".repeat(256); // 512 bytes of UTF-8, 256 characters
    assert.equal((await attempt.create("ticket", {}, { requestId: atTheLimit })).outcome, "APPLIED");
    const over = await rejection(attempt.create("ticket", {}, { requestId: `${atTheLimit}a` }));
    assert.equal(over.reason, "INVALID_ARGUMENT");
    assert.deepEqual(
      over.violations.map((v) => v.field),
      ["request_id"],
    );
  });
});
