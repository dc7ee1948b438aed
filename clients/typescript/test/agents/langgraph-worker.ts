/**
 * A queue worker that runs a LangGraph.js agent on actonce: a model node and a `ToolNode` of
 * actonce tools, each tool call a scoped attempt of the delivery. One delivery per process,
 * killed with SIGKILL after its k-th write or as its m-th model call starts.
 * `node langgraph-worker.js JOB_JSON`.
 *
 * Scenarios: `langgraph-checkpointer`, a graph with a checkpointer that outlives the worker
 * (a file per run) and the model as it is: a redelivery resumes from the last checkpoint;
 * `langgraph-durable`, a graph with no checkpointer and the model a durable model: a
 * redelivery runs the graph again and its model's recorded turns are replayed;
 * `langgraph-unkeyed`, with the checkpointer, a charge with no idempotency key, in doubt when
 * killed after it was made: the tool's error is thrown, never checkpointed as its answer.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { type BaseMessage, HumanMessage, isAIMessage } from "@langchain/core/messages";
import type { RunnableConfig } from "@langchain/core/runnables";
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { z } from "zod";

import { actonceCause, Client } from "../../src/index.js";
import { Actonce, Parked, retryPolicy } from "../../src/langgraph.js";
import type { Job, Result } from "./ai-sdk-worker.js";
import { charge, type Turn, WORDINGS } from "./scripted.js";
import { ScriptedChatModel } from "./scripted-chat.js";

const DISK = WORDINGS["Disk full"]!;
const UNKEYED: Turn[] = [
  [
    ["open_ticket", { title: "Refund later" }],
    ["charge_unkeyed", { customer: "cy", cents: 900 }],
  ],
  [],
];
const PARALLEL: Turn[] = [
  [
    ["open_ticket", { title: DISK }],
    ["open_ticket", { title: DISK }],
    ["charge_card", { customer: "ada", cents: 500 }],
  ],
  [],
];

/** A checkpointer that outlives the worker: the in-memory saver's tables, saved to a file
 * (whole, replaced at once) after every write. */
class FileSaver extends MemorySaver {
  constructor(readonly path: string) {
    super();
    if (!existsSync(path)) return;
    const saved = JSON.parse(readFileSync(path, "utf8"), (_, v) =>
      v !== null && typeof v === "object" && "$bytes" in v ? Buffer.from(v.$bytes as string, "base64") : v,
    ) as { storage: FileSaver["storage"]; writes: FileSaver["writes"] };
    this.storage = saved.storage;
    this.writes = saved.writes;
  }

  #save(): void {
    const text = JSON.stringify({ storage: this.storage, writes: this.writes }, (_, v) =>
      v instanceof Uint8Array ? { $bytes: Buffer.from(v).toString("base64") } : v,
    );
    writeFileSync(`${this.path}.new`, text);
    renameSync(`${this.path}.new`, this.path);
  }

  override async put(...args: Parameters<MemorySaver["put"]>): ReturnType<MemorySaver["put"]> {
    const saved = await super.put(...args);
    this.#save();
    return saved;
  }

  override async putWrites(...args: Parameters<MemorySaver["putWrites"]>): Promise<void> {
    await super.putWrites(...args);
    this.#save();
  }
}

export async function run(job: Job): Promise<Result> {
  let writes = 0;
  const landed = () => {
    writes++;
    if (writes === job.killAt) process.kill(process.pid, "SIGKILL");
  };
  const client = new Client(job.target);
  const actonce = new Actonce(client, { rule: "billing-agent" }); // grid.ts RULE
  const customer = (name: string) => `${job.runId}-${name}`;
  const tools = [
    actonce.tool({
      name: "open_ticket",
      description: "Open a ticket and tell the thread.",
      schema: z.object({ title: z.string() }),
      execute: async ({ title }: { title: string }, call) => {
        const ticket = await call.attempt.create("ticket", { title, run: job.runId });
        landed();
        await call.attempt.notice(job.threadId, `opened a ticket: ${title}`);
        landed();
        return ticket.id;
      },
    }),
    actonce.tool({
      name: "charge_card",
      description: "Charge the customer's card, keyed by the step's id.",
      schema: z.object({ customer: z.string(), cents: z.number() }),
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
    }),
    actonce.tool({
      name: "charge_unkeyed",
      description: "Charge the customer's card with no idempotency key.",
      schema: z.object({ customer: z.string(), cents: z.number() }),
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
    }),
  ];
  const unkeyed = job.scenario === "langgraph-unkeyed";
  const inner = new ScriptedChatModel(unkeyed ? UNKEYED : PARALLEL, job.killAtModel ?? 0);
  const checkpointed = job.scenario !== "langgraph-durable";
  // With a checkpointer the model's answer is kept in the checkpoint; without, in a durable model turn.
  const model = (checkpointed ? inner : actonce.model(inner)).bindTools(tools);
  const graph = new StateGraph(MessagesAnnotation)
    .addNode("agent", async (state: typeof MessagesAnnotation.State, config: RunnableConfig) => ({
      messages: [await model.invoke(state.messages, config)],
    }))
    .addNode("tools", actonce.toolNode(tools), { retryPolicy: retryPolicy() })
    .addEdge(START, "agent")
    .addConditionalEdges("agent", (state) => {
      const last = state.messages.at(-1);
      return last !== undefined && isAIMessage(last) && (last.tool_calls?.length ?? 0) > 0 ? "tools" : END;
    })
    .addEdge("tools", "agent")
    .compile(checkpointed ? { checkpointer: new FileSaver(`${job.result}.checkpoints`) } : {});
  let state: string;
  let parked: string[] = [];
  try {
    const result = await actonce.deliver(graph, job.runId, `thread-${job.runId}`, {
      messages: [new HumanMessage("Bill.")],
    });
    if (result instanceof Parked) {
      state = result.items[0]!.reason;
      parked = result.items.map((item) => item.id);
    } else {
      const last = (result as { messages: BaseMessage[] }).messages.at(-1);
      state = last?.content === "done" ? "done" : `answered ${JSON.stringify(last?.content)}`;
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
}
