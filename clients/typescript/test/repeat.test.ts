/**
 * A proxy (clients/testkit/holding_proxy.py) passes a create to the real
 * sidecar, which makes the ticket, and holds the answer until the client gives
 * up at its deadline. Repeating the write as the README shows, with the
 * request_id taken from the error, gets the first answer back, and the store
 * holds one ticket, not two.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { ActonceError, Client, ids, type Write } from "../src/index.js";
import { PACKAGE_DIR, type Sidecar, startSidecar } from "./sidecar.js";
import { startTestkit } from "./testkit.js";

let sidecar: Sidecar;
before(async () => (sidecar = await startSidecar()));
after(async () => sidecar.stop());

test("a write held past its deadline is repeated as the README shows", async () => {
  const proxy = await startTestkit("holding_proxy.py", sidecar.target);
  const client = new Client(proxy.target, { timeoutMs: 1000 });
  try {
    const run = { runId: `run-${randomUUID()}`, rule: "triage", checkpoint: "cp-1" };
    const attempt = await client.begin(run);
    const data = { title: "Disk full", severity: 2 };
    assert.equal(await proxy.command("hold"), "held");
    // The README's safe repeat:
    let ticket: Write;
    try {
      ticket = await attempt.create("ticket", data);
    } catch (error) {
      if (!(error instanceof ActonceError && error.retryable && error.requestId)) throw error;
      // The outcome is unknown: repeat the same write with the same request_id.
      ticket = await attempt.create("ticket", data, { requestId: error.requestId });
    }
    // End of the README's safe repeat.
    assert.equal(await proxy.command("given-up"), "1", "the first try was answered in time");

    const identity = ids.createIdentity("ticket", JSON.stringify(data));
    const [first, second] = [0, 1].map((n) => ids.deriveId("create", run.runId, run.checkpoint, identity, n));
    assert.deepEqual([ticket.id, ticket.outcome], [first, "APPLIED"]);
    assert.deepEqual((await attempt.readArtifact(first as string)).data, data);
    await assert.rejects(
      attempt.readArtifact(second as string),
      (error: unknown) => error instanceof ActonceError && error.reason === "NOT_FOUND",
    );
    assert.equal((await attempt.end()).applied, 1);
  } finally {
    client.close();
    await proxy.stop();
  }
});

function lines(text: string): string {
  return text
    .trim()
    .split("\n")
    .map((line) => line.trim())
    .join("\n");
}

test("the README shows the repeat this test makes", () => {
  const source = readFileSync(join(PACKAGE_DIR, "test", "repeat.test.ts"), "utf8");
  const example = /\/\/ The README's safe repeat:\n([\s\S]*?)\n\s*\/\/ End of/.exec(source)?.[1];
  assert.ok(example);
  assert.ok(lines(readFileSync(join(PACKAGE_DIR, "README.md"), "utf8")).includes(lines(example)));
});
