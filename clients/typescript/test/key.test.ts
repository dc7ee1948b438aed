/**
 * A key the caller chooses, against a real sidecar: a create, a thread or a step named by a
 * key is one write whatever else its data holds. A redelivery finds it, whatever time its data
 * holds; within one attempt, the same key with other data is refused KEY_REUSED, naming the id
 * the key holds.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { status } from "@grpc/grpc-js";

import { ids } from "../src/index.js";
import { liveSidecar, rejection } from "./sidecar.js";

const live = liveSidecar();

const newRun = () => ({ runId: `run-${randomUUID()}`, rule: "keys", checkpoint: "cp-1" });

test("a keyed create lands once across redeliveries whose data holds their time", async () => {
  const run = newRun();
  const first = await live.client.begin(run);
  assert.equal(first.idScheme.version, 3, "a new run derives under scheme 3, which takes keys");
  const made = { number: 1234, seenAt: "2026-12-06T05:40:00Z" };
  const created = await first.create("order", made, { key: "order-1234" });
  const identity = ids.keyedCreateIdentity("order", "order-1234");
  const derived = ids.deriveKeyedId("create", run.runId, run.checkpoint, identity, first.idScheme);
  assert.deepEqual([created.outcome, created.id], ["APPLIED", derived]);
  const same = await first.create("order", made, { key: "order-1234" });
  assert.deepEqual([same.outcome, same.id], ["ALREADY_APPLIED", created.id]);
  // In one attempt, the same key with other data names two writes by one key.
  const reused = await rejection(first.create("order", { ...made, number: 5678 }, { key: "order-1234" }));
  assert.deepEqual(
    [reused.code, reused.reason, reused.failureClass, reused.refused],
    [status.ALREADY_EXISTS, "KEY_REUSED", "REFUSED", true],
  );
  assert.equal(reused.metadata["id"], created.id, "KEY_REUSED names the id the key holds");

  // The queue delivers the job again: a new attempt of the run from the same checkpoint,
  // whose data holds a later time.
  const redelivery = await live.client.begin(run);
  const found = await redelivery.create("order", { ...made, seenAt: "2026-12-06T05:41:00Z" }, { key: "order-1234" });
  assert.deepEqual([found.outcome, found.id], ["ALREADY_APPLIED", created.id]);
  const stored = await redelivery.readArtifact(created.id);
  assert.deepEqual([stored.data, stored.version], [made, 1], "the store keeps the first delivery's data");
  const counts = await redelivery.end();
  assert.deepEqual([counts.applied, counts.alreadyApplied], [0, 1]);
});

test("keyed threads and steps are one write each", async () => {
  const run = newRun();
  const first = await live.client.begin(run);
  const thread = await first.createThread("Order 1234 at 05:40", { key: "order-1234" });
  const retitled = await rejection(first.createThread("Order 5678", { key: "order-1234" }));
  assert.equal(retitled.reason, "KEY_REUSED");
  const args = { to: "ops@example.com", at: "05:40" };
  const step = await first.beginStep("send_email", "NON_IDEMPOTENT_WRITE", args, { key: "order-1234/mail" });
  await first.endStep(step.id, { sent: true });
  const reargued = await rejection(
    first.beginStep("send_email", "NON_IDEMPOTENT_WRITE", { to: "cfo@example.com" }, { key: "order-1234/mail" }),
  );
  assert.deepEqual([reargued.reason, reargued.failureClass], ["KEY_REUSED", "REFUSED"]);

  const redelivery = await live.client.begin(run);
  const foundThread = await redelivery.createThread("Order 1234 at 05:41", { key: "order-1234" });
  assert.deepEqual([foundThread.outcome, foundThread.id], ["ALREADY_APPLIED", thread.id]);
  const later = { ...args, at: "05:41" };
  const foundStep = await redelivery.beginStep("send_email", "NON_IDEMPOTENT_WRITE", later, { key: "order-1234/mail" });
  assert.deepEqual([foundStep.done, foundStep.id, foundStep.result], [true, step.id, { sent: true }]);
});

test("a key over 255 bytes is refused naming the field key", async () => {
  const attempt = await live.client.begin(newRun());
  const refused = await rejection(attempt.create("order", { n: 1 }, { key: "k".repeat(256) }));
  assert.equal(refused.reason, "INVALID_ARGUMENT");
  assert.deepEqual(
    refused.violations.map((v) => v.field),
    ["key"],
  );
});
