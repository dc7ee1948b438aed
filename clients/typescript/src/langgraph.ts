/**
 * LangGraph.js on actonce (`@actonce/client/langgraph`).
 *
 *     const actonce = new Actonce(client, { rule: "billing" });
 *     const openTicket = actonce.tool({
 *       name: "open_ticket", description: "Open a ticket", schema: z.object({ title: z.string() }),
 *       execute: async ({ title }, call) => (await call.attempt.create("ticket", { title })).id,
 *     });
 *     const model = actonce.model(new ChatOpenAI({ model: "gpt-5" })).bindTools([openTicket]);
 *     const graph = new StateGraph(MessagesAnnotation)
 *       .addNode("agent", async (state) => ({ messages: [await model.invoke(state.messages)] }))
 *       .addNode("tools", actonce.toolNode([openTicket]), { retryPolicy: retryPolicy() })
 *       ...compile({ checkpointer });                      // or compile() with no checkpointer
 *     const result = await actonce.deliver(graph, runId, threadId, { messages: [request] });
 *
 * A tool call's id is the model's, new on every call of the model: it is the same on a
 * redelivery only when the graph keeps the model's answer. Either a checkpointer that
 * outlives the worker (every checkpoint saved before the next step runs: `durability:
 * "sync"`; a redelivery resumes the run from its last checkpoint), or no checkpointer and
 * the model called through `actonce.model(model)`, whose every call is a durable model turn
 * of the delivery (docs/model-turns.md), replayed by a later delivery. An in-memory saver
 * dies with the worker, and is refused.
 *
 * `actonce.tool(...)` is a LangChain tool whose every call is a scoped attempt of the
 * delivery; a refusal is the tool's answer, for the model; any other error is thrown, for
 * the node's retry policy (`retryPolicy()`: RETRYABLE actonce errors and your transient
 * ones) and then the queue. `actonce.toolNode(tools)` is a `ToolNode` that does not turn
 * errors into messages for the model (`handleToolErrors: false`): an IN_DOUBT checkpointed
 * as the tool's answer would be passed by every later delivery.
 */
import type { CallbackManagerForLLMRun } from "@langchain/core/callbacks/manager";
import { type BaseChatModelParams, BaseChatModel, type BindToolsInput } from "@langchain/core/language_models/chat_models";
import {
  AIMessage,
  type BaseMessage,
  isAIMessage,
  isToolMessage,
  mapChatMessagesToStoredMessages,
  mapStoredMessagesToChatMessages,
  type StoredMessage,
} from "@langchain/core/messages";
import type { ChatResult } from "@langchain/core/outputs";
import type { RunnableConfig } from "@langchain/core/runnables";
import { type StructuredToolInterface, tool as langchainTool } from "@langchain/core/tools";
import { convertToOpenAITool } from "@langchain/core/utils/function_calling";
import { Command, MemorySaver } from "@langchain/langgraph";
import { ToolNode } from "@langchain/langgraph/prebuilt";

import { AgentIntegration, type ToolRetries, turnDelivery } from "./agent-base.js";
import { ActonceError } from "./errors.js";
import {
  type Codec,
  type DeliverOptions,
  type Delivery,
  type Parked,
  refusedMessage,
  retryMayHelp,
  type ToolCall,
} from "./deliveries.js";
import {
  answeredCalls,
  type NeutralMessage,
  type NeutralRequest,
  type NeutralTool,
  type SourcedMessage,
  turnKey,
} from "./turns.js";

/** The key of the queue's run id in the graph's `configurable` and its run's metadata (the
 * Python client's too). */
export const RUN_ID_KEY = "actonce_run_id";

// -- the neutral request ----------------------------------------------------------------

const ROLES: Record<string, string> = { human: "user", ai: "assistant", system: "system", tool: "tool" };

/** A message's text (its text blocks, joined) and its other blocks. */
function contentOf(content: unknown): [string, unknown[]] {
  if (typeof content === "string") return [content, []];
  const text: string[] = [];
  const parts: unknown[] = [];
  for (const block of (content as unknown[] | undefined) ?? []) {
    if (typeof block === "string") text.push(block);
    else if ((block as { type?: string }).type === "text") text.push(String((block as { text?: string }).text ?? ""));
    else parts.push(block);
  }
  return [text.join(""), parts];
}

/**
 * LangChain messages in the neutral form (docs/model-turns.md), as the Python client's
 * integration reads them: an AI message's text and tool calls (name and arguments), a tool
 * message answering its call by position, every other message its role (`human` is
 * `user`), text and non-text blocks.
 */
export function conversation(messages: readonly BaseMessage[]): NeutralMessage[] {
  const made: SourcedMessage[] = messages.map((message): SourcedMessage => {
    const [text, parts] = contentOf(message.content);
    if (isAIMessage(message)) {
      const calls = message.tool_calls ?? [];
      if (calls.length === 0) return { role: "assistant", content: text };
      return {
        role: "assistant",
        content: text,
        tool_calls: calls.map((c) => ({ name: c.name, arguments: c.args ?? {} })),
        callIds: calls.map((c) => c.id ?? ""),
      };
    }
    if (isToolMessage(message)) return { role: "tool", callId: message.tool_call_id };
    const type = message.getType();
    const role = type === "generic" ? String((message as { role?: string }).role ?? type) : (ROLES[type] ?? type);
    return parts.length > 0 ? { role, content: text, parts } : { role, content: text };
  });
  return answeredCalls(made);
}

/** A bound tool in the neutral form: its name, description and JSON schema. */
export function toolOffered(tool: BindToolsInput): NeutralTool {
  let made: { function?: { name?: string; description?: string; parameters?: unknown }; name?: string; type?: string };
  try {
    made = convertToOpenAITool(tool as Parameters<typeof convertToOpenAITool>[0]) as typeof made;
  } catch {
    made = tool as typeof made;
  }
  const fn = made.function;
  if (fn !== undefined) return { name: String(fn.name ?? ""), description: fn.description ?? "", parameters: fn.parameters ?? {} };
  // A provider's own tool ({"type": "web_search", ...}): itself is what is offered.
  return { name: String(made.name ?? made.type ?? ""), description: "", parameters: made };
}

// -- durable model turns ------------------------------------------------------------------

const RECORDED: Codec<AIMessage> = {
  encode: (message) => mapChatMessagesToStoredMessages([message])[0],
  decode: (recorded) => {
    const message = mapStoredMessagesToChatMessages([recorded as StoredMessage])[0];
    if (message === undefined || !isAIMessage(message)) throw new TypeError("a recorded model turn holds no AI message");
    return message as AIMessage;
  },
};

function asMessage(found: unknown): AIMessage {
  if (!isAIMessage(found as BaseMessage)) throw new TypeError("the model answered no AI message");
  const message = found as AIMessage;
  // A chunk (a streamed answer) is recorded as the message it adds up to.
  return new AIMessage({
    content: message.content,
    id: message.id,
    tool_calls: message.tool_calls,
    invalid_tool_calls: message.invalid_tool_calls,
    additional_kwargs: message.additional_kwargs,
    response_metadata: message.response_metadata,
    usage_metadata: message.usage_metadata,
  });
}

/** A chat model as the durable model wraps it: one that answers messages, with tools bound or not. */
interface Answering {
  invoke(messages: BaseMessage[], options?: unknown): Promise<unknown>;
  bindTools?(tools: BindToolsInput[], kwargs?: unknown): unknown;
}

export interface DurableModelOptions {
  /** The model's name in the graph: two models of one graph record their turns apart. */
  name?: string;
}

/**
 * A chat model whose every call is a durable model turn of the delivery: keyed by its name
 * and a digest of its request (the messages and the tools bound, in the neutral form), asked
 * once, its answer recorded; a later delivery replays it, with the same tool calls under the
 * same ids. Made by `durableModel` (`actonce.model`).
 */
export class DurableChatModel extends BaseChatModel {
  constructor(
    readonly inner: Answering,
    readonly turnName = "model",
    readonly toolsOffered: NeutralTool[] = [],
    fields: BaseChatModelParams = {},
  ) {
    super(fields);
  }

  _llmType(): string {
    return "actonce-durable";
  }

  /** The request in the neutral form, as its turn is keyed. */
  request(messages: readonly BaseMessage[]): NeutralRequest {
    return { messages: conversation(messages), tools: this.toolsOffered };
  }

  async _generate(messages: BaseMessage[], options: this["ParsedCallOptions"], _run?: CallbackManagerForLLMRun): Promise<ChatResult> {
    const delivery = turnDelivery("the graph");
    const key = { ...turnKey(this.turnName, this.request(messages)) };
    const { signal } = options as { signal?: AbortSignal };
    const answer = await delivery.turn(key, async () => asMessage(await this.inner.invoke(messages, { signal })), RECORDED);
    return { generations: [{ message: answer, text: typeof answer.content === "string" ? answer.content : "" }] };
  }

  override bindTools(tools: BindToolsInput[], kwargs?: Partial<this["ParsedCallOptions"]>): DurableChatModel {
    if (this.inner.bindTools === undefined) throw new TypeError("the model takes no tools");
    const bound = this.inner.bindTools(tools, kwargs) as Answering;
    return new DurableChatModel(bound, this.turnName, tools.map(toolOffered));
  }
}

/** `model` (a chat model, or one with its tools bound) with every call a durable model turn. */
export function durableModel(model: Answering, options: DurableModelOptions = {}): DurableChatModel {
  return new DurableChatModel(model, options.name ?? "model");
}

// -- tools ------------------------------------------------------------------------------

/**
 * A node's retry policy (`addNode(name, node, { retryPolicy })`) that retries RETRYABLE
 * actonce errors and the `transient` errors of the tools' own downstream calls, and
 * nothing else: not ATTEMPT_FENCED, which a newer delivery's begin caused and every retry
 * would meet again (it ends the delivery). Each retry begins a fresh attempt per tool call, so its writes are the
 * first try's writes, made once.
 */
export function retryPolicy(options: { transient?: (error: unknown) => boolean; maxAttempts?: number } = {}) {
  const { transient = () => false, maxAttempts = 3 } = options;
  return {
    maxAttempts,
    retryOn: (error: unknown) => retryMayHelp(error) || (!(error instanceof ActonceError) && transient(error)),
  };
}

type ToolFields = Parameters<typeof langchainTool>[1];

/** A LangChain tool whose `execute` takes the tool call's `ToolCall` besides its input. */
export interface ActonceToolDefinition<INPUT, OUTPUT> extends ToolRetries {
  name: string;
  description: string;
  /** The tool's schema: a zod object or a JSON schema. */
  schema: ToolFields["schema"];
  execute: (input: INPUT, call: ToolCall, config: RunnableConfig) => Promise<OUTPUT>;
}

/** A compiled graph, as `deliver` runs it. */
export interface Graph<I, O> {
  checkpointer?: unknown;
  invoke(input: I | null | Command, config: RunnableConfig & { durability?: "sync" }): Promise<O>;
  getState(config: RunnableConfig): Promise<{
    config?: RunnableConfig;
    values: unknown;
    next: readonly string[];
    tasks: readonly { interrupts?: readonly unknown[] }[];
  }>;
}

export interface GraphDeliverOptions extends Omit<DeliverOptions, "runId" | "rule" | "needsTurns"> {
  /** The graph's own config, beside what the delivery sets (the thread, the run, the signal). */
  config?: RunnableConfig;
}

/** The tool a run's start on its thread is recorded under: the checkpoint it started from. */
export const GRAPH_RUN = "graph_run";

function checkpointOf(state: { config?: RunnableConfig }): string | null {
  return (state.config?.configurable?.["checkpoint_id"] as string | undefined) ?? null;
}

/**
 * The checkpoint of the thread the run started from, recorded by the run's first delivery
 * before the graph ran (`now`, the thread's checkpoint as this delivery found it, if none
 * was). A later delivery that finds the thread moved on from it resumes the run; one that
 * finds it where it was starts the run, which saved nothing yet.
 */
async function startedFrom(delivery: Delivery, threadId: string, now: string | null): Promise<string | null> {
  const begun = await delivery.attempt.beginStep(GRAPH_RUN, "IDEMPOTENT_WRITE", { thread: threadId });
  if (begun.done) return (begun.result as { checkpoint: string | null }).checkpoint;
  await delivery.attempt.endStep(begun.id, { checkpoint: now });
  return now;
}

/** Whether the graph's checkpointer keeps its run past the worker; an in-memory one is refused. */
function durable(graph: Graph<unknown, unknown>): boolean {
  const checkpointer = graph.checkpointer;
  if (checkpointer === undefined || checkpointer === null || checkpointer === false) return false;
  if (Object.getPrototypeOf(checkpointer) === MemorySaver.prototype) {
    throw new TypeError(
      "deliver() needs a checkpointer that outlives the worker (SQLite, PostgreSQL), or none, " +
        "with the model called through actonce.model(): a MemorySaver dies with the worker",
    );
  }
  return true;
}

/**
 * LangGraph.js's side of actonce: deliveries of the queue's runs on a graph, durable models,
 * and tools whose every call is a scoped attempt of the delivery.
 */
export class Actonce extends AgentIntegration {
  /** `model` with every call a durable model turn (for a graph with no checkpointer). */
  model(model: Answering, options: DurableModelOptions = {}): DurableChatModel {
    return durableModel(model, options);
  }

  /**
   * A LangChain tool whose every call is a scoped attempt of the delivery, named by the tool
   * call's id; `execute` gets its `ToolCall`. A refusal is the tool's answer, for the model
   * to correct; any other error is thrown, for the node's retry policy and then the queue.
   */
  tool<INPUT, OUTPUT>(definition: ActonceToolDefinition<INPUT, OUTPUT>): StructuredToolInterface {
    const { execute, retries, transient, name, description, schema } = definition;
    const run = async (input: unknown, config: RunnableConfig & { toolCall?: { id?: string }; toolCallId?: string }) => {
      const toolCallId = config.toolCall?.id ?? config.toolCallId ?? "";
      try {
        return await this.callTool(toolCallId, { retries, transient }, config.signal, (call) =>
          execute(input as INPUT, call, config),
        );
      } catch (error) {
        const refused = refusedMessage(error);
        if (refused === undefined) throw error;
        return refused;
      }
    };
    return langchainTool(run as Parameters<typeof langchainTool>[0], { name, description, schema } as ToolFields) as StructuredToolInterface;
  }

  /** A `ToolNode` of `tools` that throws their errors (a refusal is already the tool's answer). */
  toolNode(tools: StructuredToolInterface[]): ToolNode {
    return new ToolNode(tools, { handleToolErrors: false });
  }

  /**
   * Run one delivery of the queue's run `runId` on the graph's thread `threadId`.
   *
   * The first delivery starts the run with `input`. With a checkpointer, a redelivery of a
   * run the thread already holds resumes it from its last checkpoint instead (its tool calls
   * keep their ids), or answers its final state when it finished; while the run waits in an
   * `interrupt()`, it answers the state with its `__interrupt__`; a `Command({ resume })` as
   * `input` resumes it. Without a checkpointer, every delivery runs the graph from `input`,
   * and its model, called through `actonce.model`, replays the turns an earlier delivery
   * recorded. Answers `Parked` when the run has an item in doubt; throws what ended the
   * delivery, for the queue.
   */
  deliver<I, O>(
    graph: Graph<I, O>,
    runId: string,
    threadId: string,
    input: I | Command,
    options: GraphDeliverOptions = {},
  ): Promise<O | Record<string, unknown> | Parked> {
    const { config = {}, ...lease } = options;
    const kept = durable(graph as Graph<unknown, unknown>);
    return this.deliverRun(runId, async (delivery) => {
      const runConfig = {
        ...config,
        configurable: { ...config.configurable, thread_id: threadId, [RUN_ID_KEY]: runId },
        metadata: { ...config.metadata, [RUN_ID_KEY]: runId },
        signal: config.signal === undefined ? delivery.signal : AbortSignal.any([config.signal, delivery.signal]),
        ...(kept ? { durability: "sync" as const } : {}),
      };
      if (!kept || input instanceof Command) return graph.invoke(input, runConfig);
      // A redelivery of a run the thread already holds resumes it, or answers what it left.
      const state = await graph.getState(runConfig);
      const from = await startedFrom(delivery, threadId, checkpointOf(state));
      if (checkpointOf(state) === from) return graph.invoke(input, runConfig);
      const interrupts = state.tasks.flatMap((task) => task.interrupts ?? []);
      if (interrupts.length > 0) return { ...(state.values as object), __interrupt__: interrupts };
      if (state.next.length === 0) return state.values as O;
      return graph.invoke(null, runConfig);
    }, { ...lease, needsTurns: !kept });
  }
}

export type { ActonceOptions } from "./agent-base.js";
export { deliver, Parked, type ParkedItem, ToolCall } from "./deliveries.js";
export type { Delivery };
