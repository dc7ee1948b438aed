/**
 * The AI SDK on actonce (`@actonce/client/ai-sdk`; the AI SDK 7 declares Node 22 in its engines).
 *
 *     const actonce = new Actonce(client, { rule: "billing" });
 *     const model = actonce.model(openai("gpt-5"));          // durable model turns
 *     const openTicket = actonce.tool({
 *       description: "Open a ticket",
 *       inputSchema: z.object({ title: z.string() }),
 *       execute: async ({ title }, call) => (await call.attempt.create("ticket", { title })).id,
 *     });
 *     const result = await actonce.deliver(runId, (delivery) =>
 *       generateText({ model, tools: { openTicket }, prompt, abortSignal: delivery.signal }));
 *
 * `durableModel(model)` is language-model middleware (`wrapLanguageModel`): every call of
 * the model in a delivery is a durable model turn, recorded before anything acts on it and
 * replayed by a later delivery, for `generateText`, `streamText` (a streamed response is
 * recorded, then replayed as a stream) and `ToolLoopAgent` alike. `actonce.tool(...)` makes
 * each tool call a scoped attempt of the delivery; a refusal goes back to the model, any
 * other error ends the delivery, an item in doubt parks it.
 */
import {
  type FlexibleSchema,
  type LanguageModelMiddleware, tool as aiTool, type Tool, type ToolExecutionOptions, wrapLanguageModel } from "ai";

import { type ToolRetries, TurnsIntegration, turnDelivery } from "./agent-base.js";
import type { Codec, ToolCall } from "./deliveries.js";
import { answeredCalls, type NeutralRequest, type NeutralTool, parsedArguments, type SourcedMessage, turnKey } from "./turns.js";

type WrapGenerate = NonNullable<LanguageModelMiddleware["wrapGenerate"]>;
type WrapStream = NonNullable<LanguageModelMiddleware["wrapStream"]>;
type GenerateResult = Awaited<ReturnType<WrapGenerate>>;
type StreamResult = Awaited<ReturnType<WrapStream>>;
type CallParams = Parameters<WrapGenerate>[0]["params"];
type StreamPart = StreamResult["stream"] extends ReadableStream<infer P> ? P : never;
type Content = GenerateResult["content"][number];
/** A model the AI SDK takes (`LanguageModelV2`, `V3` or `V4`). */
export type WrappableModel = Parameters<typeof wrapLanguageModel>[0]["model"];

/** A turn as recorded: a generated response's content, or a streamed response's parts. */
type Recorded =
  | { kind: "generate"; content: Content[]; finishReason: GenerateResult["finishReason"]; response?: Meta }
  | { kind: "stream"; parts: StreamPart[] };
type Meta = { id?: string; modelId?: string };

/** A replayed turn asked no model: it used no tokens. */
const NO_USAGE: GenerateResult["usage"] = {
  inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 0, text: 0, reasoning: 0 },
};

const RECORDED: Codec<Recorded> = {
  encode: (turn) => turn,
  decode: (recorded) => recorded as Recorded,
};

export interface DurableModelOptions {
  /** The model's name in the agent: two models of one agent record their turns apart. */
  name?: string;
}

function keyOf(name: string, params: CallParams): Record<string, unknown> {
  return { ...turnKey(name, neutralRequest(params)) };
}

type PromptMessage = CallParams["prompt"][number];

/**
 * An AI SDK call's request in the neutral form of docs/model-turns.md: the prompt's
 * messages (each tool result a `tool` message of its own, answering its call by position),
 * and the tools offered.
 */
export function neutralRequest(params: Pick<CallParams, "prompt" | "tools">): NeutralRequest {
  const messages: SourcedMessage[] = params.prompt.flatMap((message: PromptMessage): SourcedMessage[] => {
    switch (message.role) {
      case "system":
        return [{ role: "system", content: message.content }];
      case "user": {
        const content = message.content.map((p) => (p.type === "text" ? p.text : "")).join("");
        const parts = message.content.filter((p) => p.type !== "text").map(withoutOptions);
        return [parts.length > 0 ? { role: "user", content, parts } : { role: "user", content }];
      }
      case "assistant": {
        // Reasoning and a provider's own parts are what the model thought, not what it is asked.
        const content = message.content.map((p) => (p.type === "text" ? p.text : "")).join("");
        const calls = message.content.filter((p) => p.type === "tool-call");
        if (calls.length === 0) return [{ role: "assistant", content }];
        return [
          {
            role: "assistant",
            content,
            tool_calls: calls.map((c) => ({ name: c.toolName, arguments: parsedArguments(c.input) })),
            callIds: calls.map((c) => c.toolCallId),
          },
        ];
      }
      case "tool":
        return message.content.flatMap((part): SourcedMessage[] =>
          // What a result says is left out of the key: only the call it answers.
          part.type === "tool-result" ? [{ role: "tool", callId: part.toolCallId }] : [],
        );
      default:
        return [];
    }
  });
  const tools: NeutralTool[] = (params.tools ?? []).map((t) =>
    t.type === "function"
      ? { name: t.name, description: t.description ?? "", parameters: t.inputSchema ?? {} }
      : { name: t.name, description: "", parameters: {} },
  );
  return { messages: answeredCalls(messages), tools };
}

function withoutOptions(part: object): unknown {
  const { providerOptions: _, ...rest } = part as { providerOptions?: unknown };
  return rest;
}

/**
 * Language-model middleware that makes every call a durable model turn of the current
 * delivery, keyed by what was asked: the response is recorded before the AI SDK acts on
 * it (runs its tool calls), and a later delivery that asks the same gets the recorded
 * response back, with the same tool-call ids, instead of asking the model again.
 */
export function durableTurns(options: DurableModelOptions = {}): LanguageModelMiddleware {
  const name = options.name ?? "model";
  return {
    specificationVersion: "v4",
    wrapGenerate: async ({ doGenerate, params }) => {
      const recorded = await turnDelivery().turn(keyOf(name, params), async () => generated(await doGenerate()), RECORDED);
      return asGenerated(recorded);
    },
    wrapStream: async ({ doStream, params }) => {
      const delivery = turnDelivery();
      let live: ReadableStreamDefaultController<StreamPart>;
      const stream = new ReadableStream<StreamPart>({ start: (controller) => void (live = controller) });
      const held: StreamPart[] = [];
      let asked = false;
      let begun!: () => void;
      const askedOrSettled = new Promise<void>((done) => (begun = done));
      const recording = delivery.turn(
        keyOf(name, params),
        async () => {
          asked = true;
          begun();
          const parts: StreamPart[] = [];
          const reader = (await doStream()).stream.getReader();
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            if (value.type === "error") throw value.error;
            if (value.type === "raw") continue;
            parts.push(value);
            // Text goes on as it comes; what the SDK acts on (a tool call) and the end wait
            // until the response is recorded.
            if (ACTED_ON.has(value.type)) held.push(value);
            else live.enqueue(value);
          }
          return { kind: "stream", parts } satisfies Recorded;
        },
        RECORDED,
      );
      recording
        .then(
          (recorded) => {
            for (const part of asked ? held : asStreamed(recorded)) live.enqueue(part);
            live.close();
          },
          (error: unknown) => live.error(error),
        )
        .finally(begun);
      // The stream is handed over once the turn is known asked or replayed, or failed.
      await askedOrSettled;
      return { stream };
    },
  };
}

const ACTED_ON = new Set<string>(["tool-call", "tool-result", "tool-approval-request", "finish"]);

/** `model` with every call a durable model turn of the current delivery. */
export function durableModel(model: WrappableModel, options: DurableModelOptions = {}): ReturnType<typeof wrapLanguageModel> {
  return wrapLanguageModel({ model, middleware: durableTurns(options) });
}

function generated(result: GenerateResult): Recorded {
  const meta: Meta = {};
  if (result.response?.id !== undefined) meta.id = result.response.id;
  if (result.response?.modelId !== undefined) meta.modelId = result.response.modelId;
  return { kind: "generate", content: result.content, finishReason: result.finishReason, response: meta };
}

function asGenerated(recorded: Recorded): GenerateResult {
  if (recorded.kind === "generate") {
    return {
      content: recorded.content,
      finishReason: recorded.finishReason,
      usage: NO_USAGE,
      warnings: [],
      response: recorded.response,
    } as GenerateResult;
  }
  // A turn streamed on an earlier delivery, asked for whole on this one.
  const content: Content[] = [];
  const texts = new Map<string, { type: "text" | "reasoning"; text: string }>();
  let finishReason: GenerateResult["finishReason"] = { unified: "stop", raw: undefined };
  for (const part of recorded.parts) {
    switch (part.type) {
      case "text-start":
      case "reasoning-start": {
        const block = { type: part.type === "text-start" ? ("text" as const) : ("reasoning" as const), text: "" };
        texts.set(`${block.type}:${part.id}`, block);
        content.push(block as Content);
        break;
      }
      case "text-delta":
      case "reasoning-delta": {
        const block = texts.get(`${part.type === "text-delta" ? "text" : "reasoning"}:${part.id}`);
        if (block !== undefined) block.text += part.delta;
        break;
      }
      case "finish":
        finishReason = part.finishReason;
        break;
      case "tool-call":
      case "tool-result":
      case "tool-approval-request":
      case "file":
      case "source":
        content.push(part as Content);
        break;
      default:
        break;
    }
  }
  return { content, finishReason, usage: NO_USAGE, warnings: [] } as unknown as GenerateResult;
}

function asStreamed(recorded: Recorded): StreamPart[] {
  if (recorded.kind === "stream") {
    return recorded.parts.map((part) => (part.type === "finish" ? { ...part, usage: NO_USAGE } : part));
  }
  // A turn generated whole on an earlier delivery, streamed on this one.
  const parts: StreamPart[] = [{ type: "stream-start", warnings: [] }];
  if (recorded.response !== undefined) parts.push({ type: "response-metadata", ...recorded.response } as StreamPart);
  recorded.content.forEach((item, i) => {
    if (item.type === "text" || item.type === "reasoning") {
      const id = String(i);
      parts.push({ type: `${item.type}-start`, id } as StreamPart);
      parts.push({ type: `${item.type}-delta`, id, delta: item.text } as StreamPart);
      parts.push({ type: `${item.type}-end`, id } as StreamPart);
    } else {
      parts.push(item as StreamPart);
    }
  });
  parts.push({ type: "finish", usage: NO_USAGE, finishReason: recorded.finishReason });
  return parts;
}

// -- tools ----------------------------------------------------------------------------

/** An AI SDK tool whose `execute` takes the tool call's `ToolCall` besides its input. */
export interface ActonceToolDefinition<INPUT, OUTPUT> extends ToolRetries {
  description?: string;
  title?: string;
  inputSchema: FlexibleSchema<INPUT>;
  outputSchema?: FlexibleSchema<OUTPUT>;
  /** The AI SDK's approval: the call waits for a person before it is made. */
  needsApproval?: boolean;
  strict?: boolean;
  execute: (input: INPUT, call: ToolCall, options: ToolExecutionOptions<unknown>) => Promise<OUTPUT>;
}

/**
 * The AI SDK's side of actonce: deliveries of the queue's runs, durable models, and tools
 * whose every call is a scoped attempt of the delivery.
 */
export class Actonce extends TurnsIntegration {
  /** `model` with every call a durable model turn. */
  model(model: WrappableModel, options: DurableModelOptions = {}): ReturnType<typeof wrapLanguageModel> {
    return durableModel(model, options);
  }

  /**
   * An AI SDK tool (`tool(...)`) whose every call is a scoped attempt of the delivery,
   * named by the tool call's id; `execute` gets its `ToolCall` (`call.attempt` writes,
   * `call.step(...)` brackets a call of the tool's own API). A refusal is thrown for the
   * SDK to hand to the model; any other error also ends the delivery, which asks the model
   * nothing more and throws it out of `deliver` (or answers `Parked`).
   */
  tool<INPUT, OUTPUT>(definition: ActonceToolDefinition<INPUT, OUTPUT>): Tool<INPUT, OUTPUT> {
    const { execute, retries, transient, ...rest } = definition;
    return aiTool({
      ...rest,
      execute: (input: INPUT, options: ToolExecutionOptions<unknown>) =>
        this.callTool(options.toolCallId, { retries, transient }, options.abortSignal, (call) =>
          execute(input, call, options),
        ),
    } as unknown as Tool<INPUT, OUTPUT>);
  }
}

export type { ActonceOptions } from "./agent-base.js";
export { deliver, Parked, type ParkedItem, ToolCall } from "./deliveries.js";
