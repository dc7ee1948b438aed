/**
 * A delivery in an attempt a harness began and handed over, against a real sidecar started
 * with --agent-capabilities: the harness holds the API token and begins the delivery's
 * attempt; the agent holds no token, only that attempt's id and capability, and runs an
 * integration's agent in it. Its tool calls' scoped attempts begin with that capability.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { generateText, stepCountIs } from "ai";
import { z } from "zod";

import { API_TOKEN_ENV, API_TOKEN_FILE_ENV, Client } from "../../src/index.js";
import { Actonce, durableModel, Parked } from "../../src/ai-sdk.js";
import { type Sidecar, startSidecar } from "../sidecar.js";
import { scriptedModel } from "./scripted.js";

const TOKEN = "ts-handed-attempt-t0ken-5e2a";
const RULE = "handed-attempt-tests";
let sidecar: Sidecar;
let harness: Client;
let agent: Client;

before(async () => {
  // The agent's client is given no token: nothing in its environment may name one.
  delete process.env[API_TOKEN_FILE_ENV];
  delete process.env[API_TOKEN_ENV];
  const tokenFile = join(mkdtempSync(join(tmpdir(), "actonce-ts-handed-")), "api.token");
  writeFileSync(tokenFile, `${TOKEN}\n`);
  sidecar = await startSidecar("--api-token-file", tokenFile, "--agent-capabilities", "true");
  harness = new Client(sidecar.target, { apiToken: TOKEN });
  agent = new Client(sidecar.target);
});

after(async () => {
  harness.close();
  agent.close();
  await sidecar.stop();
});

test("an agent holding only its delivery's capability runs the AI SDK in it: its writes land", async () => {
  const actonce = new Actonce(agent, { rule: RULE });
  const seen: string[] = [];
  const openTicket = actonce.tool({
    description: "Open a ticket.",
    inputSchema: z.object({ title: z.string() }),
    execute: async ({ title }, call) => {
      const ticket = await call.attempt.create("ticket", { title });
      seen.push(`${ticket.outcome} ${ticket.id}`);
      return ticket.id;
    },
  });
  const runId = `run-${randomUUID()}`;
  const model = scriptedModel([
    [
      ["open_ticket", { title: "Disk full" }],
      ["open_ticket", { title: "Fan loud" }],
    ],
    [],
  ]);
  const deliverOnce = async () => {
    // The harness begins the delivery and hands the agent its attempt's id, run and capability.
    const begun = await harness.begin({ runId, rule: RULE });
    const attempt = agent.attempt(begun.id, { ...begun.run, capability: begun.capability });
    return actonce.deliver(
      runId,
      async (delivery) => {
        const result = await generateText({
          model: durableModel(model),
          tools: { open_ticket: openTicket },
          prompt: "Open the tickets.",
          stopWhen: stepCountIs(4),
          abortSignal: delivery.signal,
        });
        const errors = result.steps.flatMap((s) => s.content).filter((c) => c.type === "tool-error");
        return { text: result.text, turns: delivery.turns, errors: errors.map((e) => String(e.error)) };
      },
      { attempt },
    );
  };

  const first = await deliverOnce();
  assert.ok(!(first instanceof Parked), "parked");
  assert.deepEqual(first, { text: "done", turns: 2, errors: [] });
  assert.equal(seen.length, 2);
  for (const what of seen) assert.match(what, /^APPLIED art_/);

  // A redelivery, in a new attempt the harness hands over: the turns replayed, the writes found.
  seen.length = 0;
  assert.deepEqual(await deliverOnce(), { text: "done", turns: 2, errors: [] });
  assert.equal(model.calls, 2, "the model was asked again");
  assert.equal(seen.length, 2);
  for (const what of seen) assert.match(what, /^ALREADY_APPLIED art_/);
});

test("an attempt handed over for another run, or a scoped one, is not a delivery's", async () => {
  const actonce = new Actonce(agent, { rule: RULE });
  const begun = await harness.begin({ runId: `run-${randomUUID()}`, rule: RULE });
  const attempt = agent.attempt(begun.id, { ...begun.run, capability: begun.capability });
  await assert.rejects(
    actonce.deliver(`run-${randomUUID()}`, async () => "ran", { attempt }),
    (error: unknown) => error instanceof TypeError && /needs an unscoped attempt of it/.test(error.message),
  );
  const scoped = agent.attempt(begun.id, { ...begun.run, scope: "call_1", capability: begun.capability });
  await assert.rejects(actonce.deliver(begun.run.runId, async () => "ran", { attempt: scoped }), TypeError);
  await attempt.end();
});
