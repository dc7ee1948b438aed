/**
 * What every grid worker shares, whatever framework it runs: the job it is handed, the
 * result it writes, its count of writes (the process kills itself with SIGKILL after the
 * job's k-th), the billing tools' bodies (a ticket and its notice, a charge keyed by its
 * step's id or with no key, and the notice after it), how a delivery's answer, `Parked` or
 * error is told to the grid, and the process's entry. Each `*-worker.ts` holds only its
 * framework's agent: its tools' wrappers, its model and how it runs.
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { z } from "zod";

import { actonceCause, Parked, type ToolCall } from "../../src/index.js";
import { charge } from "./scripted.js";

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
  killAtCharge?: boolean; // kill the process once its first card charge was made
}

/** What a delivery did. */
export interface Result {
  state: string; // "done", the reason it parked on, or the error's reason
  writes: number;
  modelCalls: number;
  parked: string[];
}

/** The rule every worker runs under: the thread a run posts to is the rule's own. */
export const RULE = "billing-agent";

/** The writes a worker made, counted as each lands; the job's k-th kills the process, or its
 * first card charge when the job says so (parallel calls come in any order, so which write
 * is the charge changes from one delivery to the next). */
export class Writes {
  count = 0;

  constructor(private readonly job: Pick<Job, "killAt" | "killAtCharge">) {}

  readonly landed = (what: "write" | "charge" = "write"): void => {
    this.count++;
    if (this.count === this.job.killAt) process.kill(process.pid, "SIGKILL");
    if (what === "charge" && this.job.killAtCharge) process.kill(process.pid, "SIGKILL");
  };
}

export const TICKET = z.object({ title: z.string() });
export const CHARGE = z.object({ customer: z.string(), cents: z.number() });
export type TicketInput = z.infer<typeof TICKET>;
export type ChargeInput = z.infer<typeof CHARGE>;

export const DESCRIBED = {
  open_ticket: "Open a ticket and tell the thread.",
  charge_card: "Charge the customer's card, keyed by the step's id.",
  charge_unkeyed: "Charge the customer's card with no idempotency key.",
} as const;

/** The billing tools' bodies, each given its input and its tool call's `ToolCall`. */
export function billing(job: Job, writes: Writes) {
  const { landed } = writes;
  const customer = (name: string) => `${job.runId}-${name}`;
  const charged = async (call: ToolCall, { customer: name, cents }: ChargeInput, made: string) => {
    await call.attempt.notice(job.threadId, `charged ${name} ${cents}`);
    landed();
    return made;
  };
  return {
    open_ticket: async ({ title }: TicketInput, call: ToolCall) => {
      const ticket = await call.attempt.create("ticket", { title, run: job.runId });
      landed();
      await call.attempt.notice(job.threadId, `opened a ticket: ${title}`);
      landed();
      return ticket.id;
    },
    charge_card: async (input: ChargeInput, call: ToolCall) => {
      const made = await call.step(
        "charge_card",
        { customer: input.customer, cents: input.cents },
        async (key) => {
          const id = await charge(job.processor, customer(input.customer), input.cents, key);
          landed("charge");
          return id;
        },
        { effect: "IDEMPOTENT_WRITE" },
      );
      return charged(call, input, made);
    },
    charge_unkeyed: async (input: ChargeInput, call: ToolCall) => {
      const made = await call.step("charge_unkeyed", { customer: input.customer, cents: input.cents }, async () => {
        const id = await charge(job.processor, customer(input.customer), input.cents, null);
        landed("charge");
        return id;
      });
      return charged(call, input, made);
    },
  };
}

/** A delivery's answer as the grid reads it: "done" when the agent's last word was. */
export function answered(result: unknown): string {
  return result === "done" ? "done" : `answered ${JSON.stringify(result)}`;
}

/**
 * Run one delivery and tell the grid what came of it: its answer (`done` says how it reads),
 * the reason it parked on and the items parked, or the reason of the error that ended it.
 * `close` runs after it, whatever came of it.
 */
export async function delivered(
  delivery: () => Promise<unknown>,
  close: () => void | Promise<void>,
  done: (result: unknown) => string = answered,
): Promise<{ state: string; parked: string[] }> {
  try {
    const result = await delivery();
    if (result instanceof Parked) return { state: result.items[0]!.reason, parked: result.items.map((item) => item.id) };
    return { state: done(result), parked: [] };
  } catch (error) {
    if (process.env["GRID_DEBUG"]) console.error(error);
    const state = actonceCause(error)?.reason ?? `${(error as Error).name}: ${(error as Error).message}`;
    return { state, parked: [] };
  } finally {
    await close();
  }
}

/** Run the worker when its module is the process's entry: `node X-worker.js JOB_JSON`. */
export async function main(moduleUrl: string, run: (job: Job) => Promise<Result>, options: { exit?: boolean } = {}) {
  if (process.argv[1] !== fileURLToPath(moduleUrl)) return;
  const job = JSON.parse(process.argv[2]!) as Job;
  writeFileSync(job.result, JSON.stringify(await run(job)));
  // A framework may keep timers of its own alive: the delivery is over.
  if (options.exit) process.exit(0);
}
