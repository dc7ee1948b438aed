/**
 * A queue worker that runs an OpenAI Agents SDK agent on actonce: its agents' models durable
 * models, its tools function tools each a scoped attempt of the delivery. One delivery per
 * process, killed with SIGKILL after its k-th write or as its m-th model call starts.
 * `node openai-agents-worker.js JOB_JSON`.
 *
 * Scenarios: parallel calls with `run` (`agents-parallel`) and streamed
 * (`agents-stream`); a triage agent that hands off to the billing agent
 * (`agents-handoff`); a charge that needs a person's approval, given as the run is
 * interrupted, the run resumed from its state (`agents-approval`); a charge with no
 * idempotency key, in doubt when killed after it was made (`agents-unkeyed`).
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Agent, run as runAgent, setTracingDisabled } from "@openai/agents";
import { z } from "zod";

import { actonceCause, Client } from "../../src/index.js";
import { Actonce, Parked } from "../../src/openai-agents.js";
import type { Job, Result } from "./ai-sdk-worker.js";
import { charge, scriptedAgentsModel, type Turn, WORDINGS } from "./scripted.js";

const DISK = WORDINGS["Disk full"]!;
const PARALLEL: Turn = [
  ["open_ticket", { title: DISK }],
  ["open_ticket", { title: DISK }],
  ["charge_card", { customer: "ada", cents: 500 }],
];
export const AGENTS_SCRIPTS: Record<string, Turn[]> = {
  "agents-parallel": [PARALLEL, []],
  "agents-stream": [PARALLEL, []],
  // The triage agent's answer hands off; the billing agent answers the turns after it.
  "agents-handoff": [[["transfer_to_billing", {}]], PARALLEL, []],
  "agents-unkeyed": [
    [
      ["open_ticket", { title: "Refund later" }],
      ["charge_unkeyed", { customer: "cy", cents: 900 }],
    ],
    [],
  ],
  "agents-approval": [
    [
      ["open_ticket", { title: DISK }],
      ["charge_card", { customer: "ada", cents: 500 }],
    ],
    [],
  ],
};

export async function run(job: Job): Promise<Result> {
  setTracingDisabled(true);
  let writes = 0;
  const landed = () => {
    writes++;
    if (writes === job.killAt) process.kill(process.pid, "SIGKILL");
  };
  const client = new Client(job.target);
  const actonce = new Actonce(client, { rule: "billing-agent" }); // grid.ts RULE
  const customer = (name: string) => `${job.runId}-${name}`;
  const openTicket = actonce.tool({
    name: "open_ticket",
    description: "Open a ticket and tell the thread.",
    parameters: z.object({ title: z.string() }),
    execute: async ({ title }: { title: string }, call) => {
      const ticket = await call.attempt.create("ticket", { title, run: job.runId });
      landed();
      await call.attempt.notice(job.threadId, `opened a ticket: ${title}`);
      landed();
      return ticket.id;
    },
  });
  const chargeCard = actonce.tool({
    name: "charge_card",
    description: "Charge the customer's card, keyed by the step's id.",
    parameters: z.object({ customer: z.string(), cents: z.number() }),
    needsApproval: job.scenario === "agents-approval",
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
  const chargeUnkeyed = actonce.tool({
    name: "charge_unkeyed",
    description: "Charge the customer's card with no idempotency key.",
    parameters: z.object({ customer: z.string(), cents: z.number() }),
    execute: async ({ customer: name, cents }: { customer: string; cents: number }, call) => {
      const made = await call.step("charge_unkeyed", { customer: name, cents }, async () => {
        const id = await charge(job.processor, customer(name), cents, null);
        landed();
        return id;
      });
      await call.attempt.notice(job.threadId, `charged ${name} ${cents}`);
      landed();
      return made;
    },
  });
  const calls = { calls: 0 };
  const script = AGENTS_SCRIPTS[job.scenario]!;
  const model = (name: string) => actonce.model(scriptedAgentsModel(script, calls, job.killAtModel ?? 0), { name });
  const billing = new Agent({
    name: "billing",
    instructions: "Bill.",
    model: model("billing"),
    tools: [openTicket, chargeCard, chargeUnkeyed],
  });
  const agent =
    job.scenario === "agents-handoff"
      ? new Agent({ name: "triage", instructions: "Hand billing to billing.", model: model("triage"), handoffs: [billing] })
      : billing;
  let state: string;
  let parked: string[] = [];
  try {
    const result = await actonce.deliver(job.runId, async (delivery) => {
      const options = { signal: delivery.signal, maxTurns: 6 };
      if (job.scenario === "agents-stream") {
        const streamed = await runAgent(agent, "Bill.", { ...options, stream: true });
        for await (const _event of streamed) void _event;
        await streamed.completed;
        return streamed.finalOutput;
      }
      let ran = await runAgent(agent, "Bill.", options);
      // A person approves each call the run was interrupted for; the run goes on from its state.
      while (ran.interruptions.length > 0) {
        for (const asked of ran.interruptions) ran.state.approve(asked);
        ran = await runAgent(agent, ran.state, options);
      }
      return ran.finalOutput;
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
  return { state, writes, modelCalls: calls.calls, parked };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const job = JSON.parse(process.argv[2]!) as Job;
  writeFileSync(job.result, JSON.stringify(await run(job)));
}
