/**
 * A queue worker that runs an AI SDK agent on actonce: one delivery of a run per process,
 * killed with SIGKILL after its k-th write, or as its m-th model call starts, when the job
 * says so. `node ai-sdk-worker.js JOB_JSON`; what the delivery did goes to the job's
 * result file.
 *
 * Scenarios: parallel calls with `generateText`, `streamText` and a `ToolLoopAgent`; a
 * tool's retries after a transient error; a charge with no idempotency key (in doubt when
 * killed after it was made, parked, and made once after `actonce audit resolve`).
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { generateText, stepCountIs, streamText, ToolLoopAgent } from "ai";
import { z } from "zod";

import { ActonceError, Client } from "../../src/index.js";
import { Actonce, Parked } from "../../src/ai-sdk.js";
import { charge, scriptedModel, type Turn, WORDINGS } from "./scripted.js";

/** One delivery: which scenario, which run, where everything is. */
export interface Job {
  scenario: string;
  runId: string;
  target: string;
  processor: string;
  threadId: string;
  result: string;
  killAt?: number; // the write after which the process kills itself (0: none)
  killAtModel?: number; // the model call as which the process kills itself (0: none)
}

/** What a delivery did. */
export interface Result {
  state: string; // "done", the reason it parked on, or the error's reason
  writes: number;
  modelCalls: number;
  parked: string[];
}

const DISK = WORDINGS["Disk full"]!;
const PARALLEL: Turn[] = [
  [
    ["open_ticket", { title: DISK }],
    ["open_ticket", { title: DISK }],
    ["charge_card", { customer: "ada", cents: 500 }],
  ],
  [],
];
export const SCRIPTS: Record<string, Turn[]> = {
  generate: PARALLEL,
  stream: PARALLEL,
  agent: PARALLEL,
  retry: [
    [
      ["flaky_notice", { text: WORDINGS["looking into it"]! }],
      ["charge_card", { customer: "bob", cents: 700 }],
    ],
    [],
  ],
  unkeyed: [
    [
      ["open_ticket", { title: "Refund later" }],
      ["charge_unkeyed", { customer: "cy", cents: 900 }],
    ],
    [],
  ],
};

export async function run(job: Job): Promise<Result> {
  let writes = 0;
  const landed = () => {
    writes++;
    if (writes === job.killAt) process.kill(process.pid, "SIGKILL");
  };
  const client = new Client(job.target);
  const actonce = new Actonce(client, { rule: "billing-agent" }) // grid.ts RULE;
  const hiccups = new Set<string>(); // tool calls that already failed once in this process
  const customer = (name: string) => `${job.runId}-${name}`;
  const tools = {
    open_ticket: actonce.tool({
      description: "Open a ticket and tell the thread.",
      inputSchema: z.object({ title: z.string() }),
      execute: async ({ title }, call) => {
        const ticket = await call.attempt.create("ticket", { title, run: job.runId });
        landed();
        await call.attempt.notice(job.threadId, `opened a ticket: ${title}`);
        landed();
        return ticket.id;
      },
    }),
    flaky_notice: actonce.tool({
      description: "Post a notice; the first try in a process fails after it.",
      inputSchema: z.object({ text: z.string() }),
      retries: 2,
      transient: (error) => error instanceof TransientError,
      execute: async ({ text }, call) => {
        const posted = await call.attempt.notice(job.threadId, text);
        landed();
        if (!hiccups.has(call.toolCallId)) {
          hiccups.add(call.toolCallId);
          throw new TransientError("the network hiccuped");
        }
        return posted.id;
      },
    }),
    charge_card: actonce.tool({
      description: "Charge the customer's card, keyed by the step's id.",
      inputSchema: z.object({ customer: z.string(), cents: z.number() }),
      execute: async ({ customer: name, cents }, call) => {
        const made = await call.step(
          "charge_card",
          { customer: name, cents },
          async (key) => {
            const id = await charge(job.processor, customer(name), cents, key);
            landed();
            return id;
          },
          { effect: "IDEMPOTENT_WRITE" },
        );
        await call.attempt.notice(job.threadId, `charged ${name} ${cents}`);
        landed();
        return made;
      },
    }),
    charge_unkeyed: actonce.tool({
      description: "Charge the customer's card with no idempotency key.",
      inputSchema: z.object({ customer: z.string(), cents: z.number() }),
      execute: async ({ customer: name, cents }, call) => {
        const made = await call.step("charge_unkeyed", { customer: name, cents }, async () => {
          const id = await charge(job.processor, customer(name), cents, null);
          landed();
          return id;
        });
        await call.attempt.notice(job.threadId, `charged ${name} ${cents}`);
        landed();
        return made;
      },
    }),
  };
  const inner = scriptedModel(SCRIPTS[job.scenario]!, job.killAtModel ?? 0);
  const model = actonce.model(inner);
  let state: string;
  let parked: string[] = [];
  try {
    const result = await actonce.deliver(job.runId, async (delivery) => {
      const common = { model, tools, prompt: "Bill.", stopWhen: stepCountIs(5), abortSignal: delivery.signal };
      if (job.scenario === "stream") {
        const streamed = streamText(common);
        for await (const _part of streamed.fullStream) void _part;
        return streamed.text;
      }
      if (job.scenario === "agent") {
        const agent = new ToolLoopAgent({ model, tools, stopWhen: stepCountIs(5) });
        return (await agent.generate({ prompt: "Bill.", abortSignal: delivery.signal })).text;
      }
      return (await generateText(common)).text;
    });
    if (result instanceof Parked) {
      state = result.items[0]!.reason;
      parked = result.items.map((item) => item.id);
    } else {
      state = result === "done" ? "done" : `answered ${JSON.stringify(result)}`;
    }
  } catch (error) {
    if (process.env["GRID_DEBUG"]) console.error(error);
    state = error instanceof ActonceError ? error.reason : `${(error as Error).name}: ${(error as Error).message}`;
  } finally {
    client.close();
  }
  return { state, writes, modelCalls: inner.calls, parked };
}

class TransientError extends Error {
  override name = "TransientError";
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const job = JSON.parse(process.argv[2]!) as Job;
  writeFileSync(job.result, JSON.stringify(await run(job)));
}
