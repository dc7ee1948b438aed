/** The AI SDK on actonce, against a live sidecar: durable model turns (generated and
 * streamed), scoped tool calls, error routing. */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { generateText, stepCountIs, streamText } from "ai";
import { z } from "zod";

import { ActonceError, Client, rawJson } from "../../src/index.js";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { Actonce, durableModel, neutralRequest, Parked } from "../../src/ai-sdk.js";
import { REPO_DIR } from "../sidecar.js";
import { type Sidecar, startSidecar } from "../sidecar.js";
import { requestDigest } from "../../src/index.js";
import { scriptedModel, type Turn } from "./scripted.js";

let sidecar: Sidecar;
let client: Client;
let actonce: Actonce;

before(async () => {
  sidecar = await startSidecar();
  client = new Client(sidecar.target);
  actonce = new Actonce(client, { rule: "ai-sdk-tests" });
});

after(async () => {
  client.close();
  await sidecar.stop();
});

const runId = () => `run-${randomUUID()}`;

/** Tools that note every call they get: (tool call id, what happened). */
function tools(seen: [string, string][]) {
  return {
    open_ticket: actonce.tool({
      description: "Open a ticket.",
      inputSchema: z.object({ title: z.string() }),
      execute: async ({ title }, call) => {
        const ticket = await call.attempt.create("ticket", { title });
        seen.push([call.toolCallId, `${ticket.outcome} ${ticket.id}`]);
        return ticket.id;
      },
    }),
    bad_ticket: actonce.tool({
      description: "Open a ticket from text that is no JSON: refused.",
      inputSchema: z.object({}),
      execute: async (_, call) => (await call.attempt.create("ticket", rawJson("{"))).id,
    }),
    shout: actonce.tool({
      description: "Post a message: this rule is not on the send allowlist.",
      inputSchema: z.object({}),
      execute: async (_, call) => {
        const thread = await call.attempt.createThread("shouts");
        return (await call.attempt.send(thread.id, "hello")).id;
      },
    }),
    charge: actonce.tool({
      description: "Charge with no idempotency key; the processor hangs up once.",
      inputSchema: z.object({ customer: z.string() }),
      execute: async ({ customer }, call) =>
        call.step("charge", { customer }, async () => {
          seen.push([call.toolCallId, `charging ${customer}`]);
          if (!seen.some(([, what]) => what === "hung up")) {
            seen.push([call.toolCallId, "hung up"]);
            throw new Error("the connection reset: charged or not?");
          }
          return "ch_1";
        }),
    }),
  };
}

const TWO_TICKETS: Turn[] = [
  [
    ["open_ticket", { title: "Disk full" }],
    ["open_ticket", { title: "Fan loud" }],
  ],
  [],
];

describe("the AI SDK, durable", () => {
  test("a redelivery replays the model's turns: the same tool calls, their writes found once", async () => {
    const run = runId();
    const model = scriptedModel(TWO_TICKETS);
    const seen: [string, string][] = [];
    const once = () =>
      actonce.deliver(run, async (delivery) => {
        const result = await generateText({
          model: durableModel(model),
          tools: tools(seen),
          prompt: "Open the tickets.",
          stopWhen: stepCountIs(4),
          abortSignal: delivery.signal,
        });
        return { text: result.text, turns: delivery.turns };
      });
    assert.deepEqual(await once(), { text: "done", turns: 2 });
    assert.equal(model.calls, 2);
    const first = [...seen].sort();
    seen.length = 0;
    assert.deepEqual(await once(), { text: "done", turns: 2 });
    assert.equal(model.calls, 2, "the model was asked again");
    const again = [...seen].sort();
    assert.deepEqual(
      again.map(([id]) => id),
      first.map(([id]) => id),
    );
    for (const [, what] of again) assert.match(what, /^ALREADY_APPLIED art_/);
  });

  test("a streamed turn is recorded, and replayed as a stream, by streamText and generateText", async () => {
    const run = runId();
    const model = scriptedModel(TWO_TICKETS);
    const seen: [string, string][] = [];
    const streamed = async () =>
      actonce.deliver(run, async (delivery) => {
        const result = streamText({
          model: durableModel(model),
          tools: tools(seen),
          prompt: "Open the tickets.",
          stopWhen: stepCountIs(4),
          abortSignal: delivery.signal,
        });
        const types = new Set<string>();
        for await (const part of result.fullStream) types.add(part.type);
        return { text: await result.text, calls: types.has("tool-call"), deltas: types.has("text-delta") };
      });
    assert.deepEqual(await streamed(), { text: "done", calls: true, deltas: true });
    const ids = seen.map(([id]) => id).sort();
    seen.length = 0;
    assert.deepEqual(await streamed(), { text: "done", calls: true, deltas: true });
    assert.equal(model.calls, 2);
    assert.deepEqual(seen.map(([id]) => id).sort(), ids);
    // Recorded as a stream, asked for whole: the same tool calls.
    seen.length = 0;
    const whole = await actonce.deliver(run, (delivery) =>
      generateText({ model: durableModel(model), tools: tools(seen), prompt: "Open the tickets.",
                     stopWhen: stepCountIs(4), abortSignal: delivery.signal }), // prettier-ignore
    );
    assert.ok(!(whole instanceof Parked));
    assert.equal(whole.text, "done");
    assert.deepEqual(seen.map(([id]) => id).sort(), ids);
    assert.equal(model.calls, 2);
  });

  test("a refusal goes back to the model, which goes on", async () => {
    const model = scriptedModel([[["bad_ticket", {}]], []]);
    const result = await actonce.deliver(runId(), (delivery) =>
      generateText({ model: durableModel(model), tools: tools([]), prompt: "Go.", stopWhen: stepCountIs(4),
                     abortSignal: delivery.signal }), // prettier-ignore
    );
    assert.ok(!(result instanceof Parked));
    assert.equal(result.text, "done");
    const errors = result.steps.flatMap((s) => s.content).filter((c) => c.type === "tool-error");
    assert.equal(errors.length, 1);
    assert.match(String((errors[0] as { error: unknown }).error), /INVALID_ARGUMENT \(REFUSED\)/);
  });

  test("any other error ends the delivery: the model is not asked again, deliver throws it", async () => {
    const model = scriptedModel([[["shout", {}]], [], []]);
    await assert.rejects(
      actonce.deliver(runId(), (delivery) =>
        generateText({ model: durableModel(model), tools: tools([]), prompt: "Go.", stopWhen: stepCountIs(4),
                       abortSignal: delivery.signal }), // prettier-ignore
      ),
      (error: unknown) => error instanceof ActonceError && error.reason === "FORBIDDEN" && error.permanent,
    );
    assert.equal(model.calls, 1, "the model saw the error");
  });

  test("a charge in doubt parks the run: it is never made twice", async () => {
    const run = runId();
    const model = scriptedModel([[["charge", { customer: "ada" }]], []]);
    const seen: [string, string][] = [];
    const once = () =>
      actonce.deliver(run, (delivery) =>
        generateText({ model: durableModel(model), tools: tools(seen), prompt: "Charge.",
                       stopWhen: stepCountIs(4), abortSignal: delivery.signal }), // prettier-ignore
      );
    // The charge's connection reset: not known not sent, so the step stays begun.
    await assert.rejects(once(), /the connection reset/);
    const parked = await once();
    assert.ok(parked instanceof Parked, `not parked: ${String(parked)}`);
    assert.equal(parked.runId, run);
    assert.deepEqual(
      parked.items.map((i) => i.reason),
      ["IN_DOUBT"],
    );
    assert.equal(seen.filter(([, what]) => what === "charging ada").length, 1);
  });

  test("a tool call outside a delivery, or a durable model outside one, is refused", async () => {
    await assert.rejects(
      generateText({ model: durableModel(scriptedModel([[]])), prompt: "Go." }),
      /outside a delivery/,
    );
  });
});

test("an AI SDK prompt's key is the shared form's: a tool call by name and arguments, a result by the call it answers", () => {
  const { vectors } = JSON.parse(readFileSync(join(REPO_DIR, "docs", "model-turn-vectors.json"), "utf8")) as {
    vectors: { name: string; digest: string }[];
  };
  const expected = vectors.find((v) => v.name === "tool result")!.digest;
  const prompt = (id: string, said: string) => [
    { role: "system" as const, content: "Bill." },
    { role: "user" as const, content: [{ type: "text" as const, text: "The disk is full" }] },
    {
      role: "assistant" as const,
      content: [
        { type: "reasoning" as const, text: "a ticket, then" },
        { type: "tool-call" as const, toolCallId: id, toolName: "open_ticket", input: { title: "Disk full", cents: 1 } },
      ],
    },
    {
      role: "tool" as const,
      content: [{ type: "tool-result" as const, toolCallId: id, toolName: "open_ticket", output: { type: "text" as const, value: said } }],
    },
  ];
  // The model names its calls anew on every call: the key does not change with their ids,
  // nor with what a result says (a redelivery hears a write as already applied).
  assert.equal(requestDigest(neutralRequest({ prompt: prompt("call_1", "tkt_1") })), expected);
  assert.equal(requestDigest(neutralRequest({ prompt: prompt("call_2", "ALREADY_APPLIED tkt_1") })), expected);
});
