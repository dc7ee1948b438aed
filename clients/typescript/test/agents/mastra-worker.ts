/**
 * A queue worker that runs a Mastra agent on actonce: its model a durable AI SDK model, its
 * tools Mastra tools each a scoped attempt of the delivery. One delivery per process, killed
 * with SIGKILL after its k-th write or as its m-th model call starts. `node mastra-worker.js JOB_JSON`.
 */
import { Agent } from "@mastra/core/agent";

import { Client } from "../../src/index.js";
import { Actonce } from "../../src/mastra.js";
import { SCRIPTS } from "./ai-sdk-worker.js";
import { scriptedModel } from "./scripted.js";
import { billing, CHARGE, DESCRIBED, delivered, type Job, main, type Result, RULE, TICKET, Writes } from "./worker.js";

export async function run(job: Job): Promise<Result> {
  const writes = new Writes(job);
  const client = new Client(job.target);
  const actonce = new Actonce(client, { rule: RULE });
  const bodies = billing(job, writes);
  const inner = scriptedModel(SCRIPTS[job.scenario.replace(/^mastra-/, "")]!, job.killAtModel ?? 0);
  const agent = new Agent({
    id: "billing",
    name: "billing",
    instructions: "Bill.",
    model: actonce.model(inner),
    tools: {
      open_ticket: actonce.tool({ id: "open_ticket", description: DESCRIBED.open_ticket, inputSchema: TICKET, execute: bodies.open_ticket }),
      charge_card: actonce.tool({ id: "charge_card", description: DESCRIBED.charge_card, inputSchema: CHARGE, execute: bodies.charge_card }),
    },
  });
  const { state, parked } = await delivered(
    () =>
      actonce.deliver(job.runId, async (delivery) => {
        const answer = await agent.generate("Bill.", { maxSteps: 5, abortSignal: delivery.signal });
        return answer.text;
      }),
    () => client.close(),
  );
  return { state, writes: writes.count, modelCalls: inner.calls, parked };
}

await main(import.meta.url, run, { exit: true });
