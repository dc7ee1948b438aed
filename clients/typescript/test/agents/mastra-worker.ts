/**
 * A queue worker that runs a Mastra agent on actonce: its model a durable AI SDK model, its
 * tools Mastra tools each a scoped attempt of the delivery. One delivery per process, killed
 * with SIGKILL after its k-th write or as its m-th model call starts. `node mastra-worker.js JOB_JSON`.
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Agent } from "@mastra/core/agent";
import { z } from "zod";

import { actonceCause, Client } from "../../src/index.js";
import { Actonce, Parked } from "../../src/mastra.js";
import { type Job, type Result, SCRIPTS } from "./ai-sdk-worker.js";
import { charge, scriptedModel } from "./scripted.js";

export async function run(job: Job): Promise<Result> {
  let writes = 0;
  const landed = () => {
    writes++;
    if (writes === job.killAt) process.kill(process.pid, "SIGKILL");
  };
  const client = new Client(job.target);
  const actonce = new Actonce(client, { rule: "billing-agent" }); // grid.ts RULE
  const customer = (name: string) => `${job.runId}-${name}`;
  const openTicket = actonce.tool({
    id: "open_ticket",
    description: "Open a ticket and tell the thread.",
    inputSchema: z.object({ title: z.string() }),
    execute: async ({ title }: { title: string }, call) => {
      const ticket = await call.attempt.create("ticket", { title, run: job.runId });
      landed();
      await call.attempt.notice(job.threadId, `opened a ticket: ${title}`);
      landed();
      return ticket.id;
    },
  });
  const chargeCard = actonce.tool({
    id: "charge_card",
    description: "Charge the customer's card, keyed by the step's id.",
    inputSchema: z.object({ customer: z.string(), cents: z.number() }),
    execute: async ({ customer: name, cents }: { customer: string; cents: number }, call) => {
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
  });
  const inner = scriptedModel(SCRIPTS[job.scenario.replace(/^mastra-/, "")]!, job.killAtModel ?? 0);
  const agent = new Agent({
    id: "billing",
    name: "billing",
    instructions: "Bill.",
    model: actonce.model(inner),
    tools: { open_ticket: openTicket, charge_card: chargeCard },
  });
  let state: string;
  let parked: string[] = [];
  try {
    const result = await actonce.deliver(job.runId, async (delivery) => {
      const answer = await agent.generate("Bill.", { maxSteps: 5, abortSignal: delivery.signal });
      return answer.text;
    });
    if (result instanceof Parked) {
      state = result.items[0]!.reason;
      parked = result.items.map((item) => item.id);
    } else {
      state = result === "done" ? "done" : `answered ${JSON.stringify(result)}`;
    }
  } catch (error) {
    if (process.env["GRID_DEBUG"]) console.error(error);
    state = actonceCause(error)?.reason ?? `${(error as Error).name}: ${(error as Error).message}`;
  } finally {
    client.close();
  }
  return { state, writes, modelCalls: inner.calls, parked };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const job = JSON.parse(process.argv[2]!) as Job;
  writeFileSync(job.result, JSON.stringify(await run(job)));
  // Mastra may keep timers of its own alive: the delivery is over.
  process.exit(0);
}
