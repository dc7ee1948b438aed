/**
 * Attempt capabilities against a real sidecar started with --agent-capabilities: a harness
 * holds the API token and begins attempts; the agent process it starts holds only its
 * attempt's id and capability, on a client with no token. That agent makes its own attempt's
 * calls and begins its delivery's tool calls, and cannot begin, fence or read another run.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { status } from "@grpc/grpc-js";

import { ActonceError, API_TOKEN_ENV, API_TOKEN_FILE_ENV, Client } from "../src/index.js";
import { rejection, SEND_RULE, type Sidecar, startSidecar } from "./sidecar.js";

const TOKEN = "ts-capability-t0ken-41c7";
let guarded: Sidecar;
let plain: Sidecar;

before(async () => {
  // The agent's client is given no token: nothing in its environment may name one.
  delete process.env[API_TOKEN_FILE_ENV];
  delete process.env[API_TOKEN_ENV];
  const tokenFile = join(mkdtempSync(join(tmpdir(), "actonce-ts-capability-")), "api.token");
  writeFileSync(tokenFile, `${TOKEN}\n`);
  guarded = await startSidecar("--api-token-file", tokenFile, "--agent-capabilities", "true");
  plain = await startSidecar();
});

after(async () => {
  await guarded.stop();
  await plain.stop();
});

const newRun = () => ({ runId: `run-${randomUUID()}`, rule: SEND_RULE, checkpoint: "cp" });

function assertCapabilityRefused(error: ActonceError, what: string): void {
  assert.deepEqual(
    [error.code, error.reason, error.failureClass],
    [status.PERMISSION_DENIED, "CAPABILITY_REFUSED", "PERMANENT"],
    what,
  );
}

describe("with --agent-capabilities", () => {
  test("an agent given only its attempt's capability reaches that attempt alone", async () => {
    const harness = new Client(guarded.target, { apiToken: TOKEN });
    const agent = new Client(guarded.target); // no token
    try {
      const mine = await harness.begin(newRun());
      const otherRun = newRun();
      const theirs = await harness.begin(otherRun);
      const theirTicket = await theirs.create("ticket", { title: "theirs" });
      assert.ok(mine.capability !== "" && mine.capability !== theirs.capability, "each attempt has its own");

      // What the harness hands the agent: the attempt's id, its run and its capability.
      const own = agent.attempt(mine.id, { ...mine.run, capability: mine.capability });
      const ticket = await own.create("ticket", { title: "mine" });
      const thread = await own.createThread("Mine");
      await own.notice(thread.id, `filed ${ticket.id}`);
      assert.equal((await own.readArtifact(ticket.id)).id, ticket.id);
      const step = await own.beginStep("page", "IDEMPOTENT_WRITE", { who: "ops" });
      await own.endStep(step.id, { paged: true });
      const toolCall = await own.beginScoped({ ...mine.run, scope: "call_1" });
      assert.ok(toolCall.capability !== "" && toolCall.capability !== own.capability);
      await toolCall.notice(thread.id, "from the tool call");

      // Another run: neither begun, nor fenced, nor read.
      const unauthenticated = await rejection(agent.begin(otherRun));
      assert.deepEqual([unauthenticated.code, unauthenticated.reason], [status.UNAUTHENTICATED, "UNAUTHENTICATED"]);
      for (const run of [otherRun, mine.run]) {
        // An unscoped BeginAttempt carrying the agent's capability: a run's begin, or its fence.
        assertCapabilityRefused(await rejection(own.beginScoped({ ...run, scope: "" })), `begin ${run.runId}`);
      }
      const stolen = agent.attempt(theirs.id, { ...otherRun, capability: mine.capability });
      assertCapabilityRefused(await rejection(stolen.readArtifact(theirTicket.id)), "read through another attempt");
      assertCapabilityRefused(await rejection(stolen.create("ticket", { title: "planted" })), "write there");
      const forged = agent.attempt(theirs.id, { ...otherRun, capability: `acap1.${theirs.id}.forged` });
      assertCapabilityRefused(await rejection(forged.end()), "a forged capability");

      // The other run's attempt goes on, unfenced, with its own writes only.
      await theirs.createThread("Theirs");
      assert.equal((await theirs.end()).applied, 2);
      await own.end();
    } finally {
      harness.close();
      agent.close();
    }
  });
});

test("a sidecar without --agent-capabilities issues none", async () => {
  const client = new Client(plain.target);
  try {
    const attempt = await client.begin(newRun());
    assert.equal(attempt.capability, "");
    await attempt.end();
  } finally {
    client.close();
  }
});
