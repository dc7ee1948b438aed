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
import { type BaseMessage, HumanMessage, isAIMessage } from "@langchain/core/messages";
import type { RunnableConfig } from "@langchain/core/runnables";
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";

import { Client } from "../../src/index.js";
import { Actonce, retryPolicy } from "../../src/langgraph.js";
import { type Turn, WORDINGS } from "./scripted.js";
import { ScriptedChatModel } from "./scripted-chat.js";
import { answered, billing, CHARGE, DESCRIBED, delivered, type Job, main, type Result, RULE, TICKET, Writes } from "./worker.js";

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
  const writes = new Writes(job);
  const client = new Client(job.target);
  const actonce = new Actonce(client, { rule: RULE });
  const bodies = billing(job, writes);
  const tools = [
    actonce.tool({ name: "open_ticket", description: DESCRIBED.open_ticket, schema: TICKET, execute: bodies.open_ticket }),
    actonce.tool({ name: "charge_card", description: DESCRIBED.charge_card, schema: CHARGE, execute: bodies.charge_card }),
    actonce.tool({
      name: "charge_unkeyed",
      description: DESCRIBED.charge_unkeyed,
      schema: CHARGE,
      execute: bodies.charge_unkeyed,
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
  const { state, parked } = await delivered(
    () => actonce.deliver(graph, job.runId, `thread-${job.runId}`, { messages: [new HumanMessage("Bill.")] }),
    () => client.close(),
    (result) => answered((result as { messages: BaseMessage[] }).messages.at(-1)?.content),
  );
  return { state, writes: writes.count, modelCalls: inner.calls, parked };
}

await main(import.meta.url, run);
