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
import { generateText, stepCountIs, streamText, ToolLoopAgent } from "ai";
import { z } from "zod";

import { Client } from "../../src/index.js";
import { Actonce } from "../../src/ai-sdk.js";
import { scriptedModel, type Turn, WORDINGS } from "./scripted.js";
import { billing, CHARGE, DESCRIBED, delivered, type Job, main, type Result, RULE, TICKET, Writes } from "./worker.js";

export type { Job, Result } from "./worker.js";

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
  const writes = new Writes(job);
  const client = new Client(job.target);
  const actonce = new Actonce(client, { rule: RULE });
  const hiccups = new Set<string>(); // tool calls that already failed once in this process
  const bodies = billing(job, writes);
  const tools = {
    open_ticket: actonce.tool({ description: DESCRIBED.open_ticket, inputSchema: TICKET, execute: bodies.open_ticket }),
    flaky_notice: actonce.tool({
      description: "Post a notice; the first try in a process fails after it.",
      inputSchema: z.object({ text: z.string() }),
      retries: 2,
      transient: (error) => error instanceof TransientError,
      execute: async ({ text }, call) => {
        const posted = await call.attempt.notice(job.threadId, text);
        writes.landed();
        if (!hiccups.has(call.toolCallId)) {
          hiccups.add(call.toolCallId);
          throw new TransientError("the network hiccuped");
        }
        return posted.id;
      },
    }),
    charge_card: actonce.tool({ description: DESCRIBED.charge_card, inputSchema: CHARGE, execute: bodies.charge_card }),
    charge_unkeyed: actonce.tool({
      description: DESCRIBED.charge_unkeyed,
      inputSchema: CHARGE,
      execute: bodies.charge_unkeyed,
    }),
  };
  const inner = scriptedModel(SCRIPTS[job.scenario]!, job.killAtModel ?? 0);
  const model = actonce.model(inner);
  const { state, parked } = await delivered(
    () =>
      actonce.deliver(job.runId, async (delivery) => {
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
      }),
    () => client.close(),
  );
  return { state, writes: writes.count, modelCalls: inner.calls, parked };
}

class TransientError extends Error {
  override name = "TransientError";
}

await main(import.meta.url, run);
