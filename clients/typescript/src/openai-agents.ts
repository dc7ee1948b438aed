/**
 * The OpenAI Agents SDK for TypeScript on actonce (`@actonce/client/openai-agents`).
 *
 *     const actonce = new Actonce(client, { rule: "billing" });
 *     const openTicket = actonce.tool({
 *       name: "open_ticket", description: "Open a ticket",
 *       parameters: z.object({ title: z.string() }),
 *       execute: async ({ title }, call) => (await call.attempt.create("ticket", { title })).id,
 *     });
 *     const agent = new Agent({ name: "billing", instructions,
 *                               model: actonce.model(new OpenAIResponsesModel(openai, "gpt-5"), { name: "billing" }),
 *                               tools: [openTicket] });
 *     const result = await actonce.deliver(runId, (delivery) =>
 *       run(agent, request, { signal: delivery.signal }));
 *
 * `actonce.model(model)` is a `Model` whose every call is a durable model turn of the
 * delivery, keyed by the model's name and what it was asked (docs/model-turns.md, the key
 * the Python client's integration records under when `name` is the agent's name): the
 * response is recorded before the SDK acts on it, and a later delivery that asks the same
 * replays it, with the same tool-call ids. `getStreamedResponse` records the streamed
 * response, then replays it as a stream. `actonce.tool(...)` is a function tool whose every
 * call (`details.toolCall.callId`) is a scoped attempt of the delivery; its `errorFunction`
 * hands the model a refusal only, and throws every other error out of the run, which ends
 * the delivery (an item in doubt parks it). Handoffs, parallel calls and approvals
 * (`needsApproval`, the run resumed from its `RunState`) are the SDK's own.
 */
import {
  type AgentInputItem,
  type FunctionTool,
  type Model,
  type ModelRequest,
  type ModelResponse,
  type RunContext,
  type StreamEvent,
  tool as agentsTool,
  Usage,
} from "@openai/agents";

import { type ToolRetries, TurnsIntegration, turnDelivery } from "./agent-base.js";
import { type Codec, refusedMessage, type ToolCall } from "./deliveries.js";
import {
  answeredCalls,
  type NeutralMessage,
  type NeutralRequest,
  type NeutralTool,
  parsedArguments,
  type SourcedMessage,
  turnKey,
} from "./turns.js";

type ToolOptions = Parameters<typeof agentsTool>[0];
type ToolCallDetails = Parameters<FunctionTool["invoke"]>[2];
type OutputItem = ModelResponse["output"][number];

/** A turn as recorded: the response's output items and id (the Python client's form). */
interface Recorded {
  output: OutputItem[];
  response_id?: string;
}

const RECORDED: Codec<ModelResponse> = {
  encode: (response): Recorded => ({
    output: response.output,
    ...(response.responseId === undefined ? {} : { response_id: response.responseId }),
  }),
  // A replayed turn asked no model: it used no tokens.
  decode: (recorded) => {
    const { output, response_id } = recorded as Recorded;
    return { output, usage: new Usage(), ...(response_id === undefined ? {} : { responseId: response_id }) };
  },
};

// -- the neutral request ----------------------------------------------------------------

function plainItem(item: object): Record<string, unknown> {
  const { id: _, providerData: __, ...rest } = item as Record<string, unknown>;
  return rest;
}

/** An item's text (its text parts, joined) and its other parts, their ids left out. */
function contentOf(content: unknown): [string, unknown[]] {
  if (content === undefined || content === null) return ["", []];
  if (typeof content === "string") return [content, []];
  const text: string[] = [];
  const parts: unknown[] = [];
  for (const part of content as Record<string, unknown>[]) {
    if (["input_text", "output_text", "text"].includes(String(part["type"]))) text.push(String(part["text"] ?? ""));
    else parts.push(plainItem(part));
  }
  return [text.join(""), parts];
}

function say(messages: SourcedMessage[], role: string, content: string, parts: unknown[] = []): void {
  messages.push(parts.length > 0 ? { role, content, parts } : { role, content });
}

/**
 * The SDK's model input in the neutral form (docs/model-turns.md), as the Python client's
 * integration reads it: the instructions a system message; each message item its role
 * (`developer` is `system`) and text; a `function_call` a tool call (name and arguments) of
 * the assistant message before it, or of one of its own; a `function_call_result` only the
 * call it answers, by position; reasoning left out; any other item as it is, its id left out.
 */
export function conversation(instructions: string | undefined, input: string | AgentInputItem[]): NeutralMessage[] {
  const messages: SourcedMessage[] = [];
  if (instructions !== undefined) say(messages, "system", instructions);
  if (typeof input === "string") {
    say(messages, "user", input);
    return answeredCalls(messages);
  }
  for (const item of input as Record<string, unknown>[]) {
    const kind = item["type"] ?? ("role" in item ? "message" : undefined);
    if (kind === "message") {
      const role = String(item["role"] ?? "user");
      const [text, parts] = contentOf(item["content"]);
      say(messages, role === "developer" ? "system" : role, text, parts);
    } else if (kind === "function_call") {
      const call = { name: String(item["name"] ?? ""), arguments: parsedArguments(item["arguments"]) };
      const last = messages.at(-1);
      if (last !== undefined && last.role === "assistant") {
        last.tool_calls = [...(last.tool_calls ?? []), call];
        last.callIds = [...(last.callIds ?? []), String(item["callId"] ?? "")];
      } else {
        messages.push({ role: "assistant", content: "", tool_calls: [call], callIds: [String(item["callId"] ?? "")] });
      }
    } else if (kind === "function_call_result") {
      messages.push({ role: "tool", callId: String(item["callId"] ?? "") });
    } else if (kind !== "reasoning") {
      say(messages, "item", "", [plainItem(item)]);
    }
  }
  return answeredCalls(messages);
}

/** The tools and handoffs a request offers, in the neutral form: a handoff is the tool the
 * model calls to hand off. */
export function toolsOffered(request: Pick<ModelRequest, "tools" | "handoffs">): NeutralTool[] {
  const tools = request.tools.map((t): NeutralTool =>
    t.type === "function"
      ? { name: t.name, description: t.description ?? "", parameters: t.parameters ?? {} }
      : { name: String((t as { name?: string }).name ?? t.type), description: "", parameters: {} },
  );
  const handoffs = request.handoffs.map((h): NeutralTool => ({
    name: h.toolName,
    description: h.toolDescription ?? "",
    parameters: h.inputJsonSchema ?? {},
  }));
  return [...tools, ...handoffs];
}

/** An SDK model request in the neutral form. */
export function neutralRequest(request: ModelRequest): NeutralRequest {
  return { messages: conversation(request.systemInstructions, request.input), tools: toolsOffered(request) };
}

// -- the durable model ------------------------------------------------------------------

export interface DurableModelOptions {
  /** The turns' name: the agent's name, as the Python client keys them (default "model"). */
  name?: string;
}

/**
 * A `Model` whose every call is a durable model turn of the current delivery, keyed by its
 * name and what it was asked: the response is recorded before the SDK acts on it (runs its
 * tool calls, hands off), and a later delivery that asks the same gets it back instead of
 * asking `model` again.
 */
export class DurableModel implements Model {
  readonly name: string;

  constructor(
    readonly model: Model,
    options: DurableModelOptions = {},
  ) {
    this.name = options.name ?? "model";
  }

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const key = { ...turnKey(this.name, neutralRequest(request)) };
    return turnDelivery().turn(key, () => this.model.getResponse(request), RECORDED);
  }

  /** The model's events as they come, but its `response_done`, which the SDK acts on: it
   * waits until the response is recorded. A replayed turn streams its response whole. */
  async *getStreamedResponse(request: ModelRequest): AsyncIterable<StreamEvent> {
    const key = { ...turnKey(this.name, neutralRequest(request)) };
    const live = new Channel<StreamEvent>();
    let done: StreamEvent | undefined;
    const recording = turnDelivery().turn<ModelResponse>(
      key,
      async () => {
        for await (const event of this.model.getStreamedResponse(request)) {
          if (event.type !== "response_done") {
            live.push(event);
            continue;
          }
          done = event;
          const { id, output } = event.response;
          return { output: output as OutputItem[], usage: new Usage(event.response.usage), responseId: id };
        }
        throw new Error("the model's stream ended without a response");
      },
      RECORDED,
    );
    void recording.then(
      () => live.close(),
      (error: unknown) => live.fail(error),
    );
    yield* live;
    const recorded = await recording;
    yield done ?? { type: "response_done", response: { id: recorded.responseId ?? "replayed", usage: new Usage(), output: recorded.output } } as StreamEvent; // prettier-ignore
  }
}

/** Events handed from a recording to the stream that yields them. */
class Channel<T> implements AsyncIterable<T> {
  readonly #items: T[] = [];
  #end: { error?: unknown } | undefined;
  #wake: () => void = () => {};

  push(item: T): void {
    this.#items.push(item);
    this.#wake();
  }

  close(): void {
    this.#end = {};
    this.#wake();
  }

  fail(error: unknown): void {
    this.#end = { error };
    this.#wake();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      while (this.#items.length > 0) yield this.#items.shift()!;
      if (this.#end !== undefined) {
        if ("error" in this.#end) throw this.#end.error;
        return;
      }
      await new Promise<void>((wake) => (this.#wake = wake));
    }
  }
}

// -- tools ----------------------------------------------------------------------------

/**
 * A function tool's `errorFunction`: a REFUSED call goes back to the model, which can
 * correct it; every other error is thrown out of the run, for the queue (the SDK's default
 * would hand the model an IN_DOUBT, say).
 */
export function handleToolError(_context: RunContext<unknown>, error: unknown): string {
  const refused = refusedMessage(error);
  if (refused === undefined) throw error;
  return refused;
}

/** A function tool whose `execute` takes the tool call's `ToolCall` besides its input. */
export interface ActonceToolDefinition<INPUT, OUTPUT> extends ToolRetries {
  name: string;
  description: string;
  /** The SDK's `parameters`: a zod object or a JSON schema. */
  parameters: ToolOptions["parameters"];
  strict?: boolean;
  /** The SDK's approval: the run is interrupted for a person before the call is made. */
  needsApproval?: ToolOptions["needsApproval"];
  execute: (input: INPUT, call: ToolCall, context: RunContext<unknown> | undefined, details: ToolCallDetails) => Promise<OUTPUT>;
}

/**
 * The OpenAI Agents SDK's side of actonce: deliveries of the queue's runs, durable models,
 * and function tools whose every call is a scoped attempt of the delivery.
 * `deliver(runId, body)`: `body` runs the agent (`run(agent, input, { signal:
 * delivery.signal })`; a run resumed from its `RunState` after an approval too).
 */
export class Actonce extends TurnsIntegration {
  /** `model` with every call a durable model turn; name it after its agent. */
  model(model: Model, options: DurableModelOptions = {}): DurableModel {
    return new DurableModel(model, options);
  }

  /**
   * A function tool (`tool(...)`) whose every call is a scoped attempt of the delivery,
   * named by the tool call's id; `execute` gets its `ToolCall` (`call.attempt` writes,
   * `call.step(...)` brackets a call of the tool's own API). A refusal goes back to the
   * model; any other error is thrown out of the run and ends the delivery (`deliver`
   * throws it, or answers `Parked`).
   */
  tool<INPUT, OUTPUT>(definition: ActonceToolDefinition<INPUT, OUTPUT>): FunctionTool {
    const { execute, retries, transient, ...rest } = definition;
    return agentsTool({
      ...rest,
      errorFunction: handleToolError,
      execute: (input: unknown, context?: RunContext<unknown>, details?: ToolCallDetails) =>
        this.callTool(details?.toolCall?.callId ?? "", { retries, transient }, details?.signal, (call) =>
          execute(input as INPUT, call, context, details),
        ),
    } as ToolOptions) as FunctionTool;
  }
}

export type { ActonceOptions } from "./agent-base.js";
export { deliver, Parked, type ParkedItem, ToolCall } from "./deliveries.js";
