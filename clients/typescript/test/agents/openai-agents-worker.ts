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
import { Agent, run as runAgent, setTracingDisabled } from "@openai/agents";

import { Client } from "../../src/index.js";
import { Actonce } from "../../src/openai-agents.js";
import { scriptedAgentsModel, type Turn, WORDINGS } from "./scripted.js";
import { billing, CHARGE, DESCRIBED, delivered, type Job, main, type Result, RULE, TICKET, Writes } from "./worker.js";

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
  const writes = new Writes(job);
  const client = new Client(job.target);
  const actonce = new Actonce(client, { rule: RULE });
  const bodies = billing(job, writes);
  const tools = [
    actonce.tool({ name: "open_ticket", description: DESCRIBED.open_ticket, parameters: TICKET, execute: bodies.open_ticket }),
    actonce.tool({
      name: "charge_card",
      description: DESCRIBED.charge_card,
      parameters: CHARGE,
      needsApproval: job.scenario === "agents-approval",
      execute: bodies.charge_card,
    }),
    actonce.tool({
      name: "charge_unkeyed",
      description: DESCRIBED.charge_unkeyed,
      parameters: CHARGE,
      execute: bodies.charge_unkeyed,
    }),
  ];
  const calls = { calls: 0 };
  const script = AGENTS_SCRIPTS[job.scenario]!;
  const model = (name: string) => actonce.model(scriptedAgentsModel(script, calls, job.killAtModel ?? 0), { name });
  const billingAgent = new Agent({ name: "billing", instructions: "Bill.", model: model("billing"), tools });
  const agent =
    job.scenario === "agents-handoff"
      ? new Agent({ name: "triage", instructions: "Hand billing to billing.", model: model("triage"), handoffs: [billingAgent] })
      : billingAgent;
  const { state, parked } = await delivered(
    () =>
      actonce.deliver(job.runId, async (delivery) => {
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
      }),
    () => client.close(),
  );
  return { state, writes: writes.count, modelCalls: calls.calls, parked };
}

await main(import.meta.url, run);
