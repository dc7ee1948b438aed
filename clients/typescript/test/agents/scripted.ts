/**
 * What the agent tests share: a model scripted as a real one answers, and a card processor.
 *
 * The model's answer n is the script's turn after n answers of the model (the assistant
 * messages its prompt holds), but every call names its tool calls anew (a fresh id each
 * time), gives parallel calls in a shuffled order, and words its texts its own way. An
 * agent that asks it again makes other tool calls than the first time: only a durable
 * model turn keeps them.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { LanguageModelV4, LanguageModelV4CallOptions, LanguageModelV4StreamPart } from "@ai-sdk/provider";

/** (tool, arguments) each; an empty turn answers "done". A string[] argument is one of its wordings. */
export type Turn = [string, Record<string, unknown>][];

/** What a scripted model may call one text: a real model words it its own way on each call. */
export const WORDINGS: Record<string, string[]> = {
  "Disk full": ["Disk full", "Disk is full", "disk full"],
  "looking into it": ["looking into it", "Looking into it.", "looking into it!"],
};

/** The script's text for any of its wordings (or the text as it is). */
export function canonical(text: string): string {
  // Each wording in turn, as the Python grid's canonical() does.
  for (const [plain, wordings] of Object.entries(WORDINGS)) {
    for (const wording of wordings) text = text.replace(wording, plain);
  }
  return text;
}

function pick<T>(items: readonly T[]): T {
  return items[Math.floor(Math.random() * items.length)]!;
}

function shuffled<T>(items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

export interface ScriptedModel extends LanguageModelV4 {
  /** Calls made to the model in this process. */
  readonly calls: number;
}

/** A model answering `script`; `killAtCall`: the process kills itself (SIGKILL) as its k-th call starts. */
export function scriptedModel(script: Turn[], killAtCall = 0): ScriptedModel {
  let calls = 0;
  const answer = (options: LanguageModelV4CallOptions) => {
    calls++;
    if (calls === killAtCall) process.kill(process.pid, "SIGKILL");
    const answered = options.prompt.filter((m) => m.role === "assistant").length;
    const turn = script[answered] ?? [];
    return shuffled(turn).map(([toolName, args]) => ({
      toolCallId: `call_${randomUUID().slice(0, 12)}`,
      toolName,
      input: JSON.stringify(
        Object.fromEntries(Object.entries(args).map(([k, v]) => [k, Array.isArray(v) ? pick(v) : v])),
      ),
    }));
  };
  const finish = (toolCalls: unknown[]) => ({
    unified: toolCalls.length > 0 ? ("tool-calls" as const) : ("stop" as const),
    raw: undefined,
  });
  const usage = {
    inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 5, text: 5, reasoning: 0 },
  };
  return {
    specificationVersion: "v4",
    provider: "scripted",
    modelId: "scripted",
    supportedUrls: {},
    get calls() {
      return calls;
    },
    async doGenerate(options) {
      const toolCalls = answer(options);
      const content =
        toolCalls.length > 0
          ? toolCalls.map((c) => ({ type: "tool-call" as const, ...c }))
          : [{ type: "text" as const, text: "done" }];
      return { content, finishReason: finish(toolCalls), usage, warnings: [], response: { id: `resp_${randomUUID()}` } };
    },
    async doStream(options) {
      const toolCalls = answer(options);
      const parts: LanguageModelV4StreamPart[] = [{ type: "stream-start", warnings: [] }];
      if (toolCalls.length === 0) {
        parts.push({ type: "text-start", id: "t" }, { type: "text-delta", id: "t", delta: "do" });
        parts.push({ type: "text-delta", id: "t", delta: "ne" }, { type: "text-end", id: "t" });
      }
      for (const c of toolCalls) {
        parts.push({ type: "tool-input-start", id: c.toolCallId, toolName: c.toolName });
        parts.push({ type: "tool-input-delta", id: c.toolCallId, delta: c.input });
        parts.push({ type: "tool-input-end", id: c.toolCallId });
        parts.push({ type: "tool-call", ...c });
      }
      parts.push({ type: "finish", usage, finishReason: finish(toolCalls) });
      const stream = new ReadableStream<LanguageModelV4StreamPart>({
        async start(controller) {
          for (const part of parts) {
            controller.enqueue(part);
            await new Promise((done) => setImmediate(done));
          }
          controller.close();
        },
      });
      return { stream };
    },
  };
}

// -- the card processor -----------------------------------------------------------------

export interface Charge {
  id: string;
  key: string | null;
  customer: string;
  cents: number;
}

/**
 * A fake card processor: a small real HTTP service that charges cards, with idempotency
 * keys as card processors have them. POST /charges {"customer", "cents"}, header
 * Idempotency-Key (optional): a key seen before answers the charge it made, and charges
 * nothing. GET /charges lists every charge.
 */
export class CardProcessor {
  readonly charges: Charge[] = [];
  readonly #byKey = new Map<string, Charge>();
  #server: Server | undefined;
  url = "";

  async start(): Promise<this> {
    this.#server = createServer((request, response) => void this.#answer(request, response));
    await new Promise<void>((done) => this.#server!.listen(0, "127.0.0.1", done));
    const address = this.#server.address();
    if (address === null || typeof address !== "object") throw new Error("no address");
    this.url = `http://127.0.0.1:${address.port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.#server?.closeAllConnections();
    await new Promise<void>((done) => this.#server?.close(() => done()) ?? done());
  }

  /** The charges of the customers `prefix` starts, as (customer without it, cents). */
  chargedFor(prefix: string): [string, number][] {
    return this.charges
      .filter((c) => c.customer.startsWith(`${prefix}-`))
      .map((c): [string, number] => [c.customer.slice(prefix.length + 1), c.cents]);
  }

  async #answer(request: IncomingMessage, response: import("node:http").ServerResponse): Promise<void> {
    let body = "";
    for await (const chunk of request) body += chunk;
    if (request.method === "GET") {
      response.end(JSON.stringify(this.charges));
      return;
    }
    const { customer, cents } = JSON.parse(body) as { customer: string; cents: number };
    const key = (request.headers["idempotency-key"] as string | undefined) ?? null;
    let charge = key === null ? undefined : this.#byKey.get(key);
    if (charge === undefined) {
      charge = { id: `ch_${this.charges.length + 1}`, key, customer, cents };
      this.charges.push(charge);
      if (key !== null) this.#byKey.set(key, charge);
    }
    response.setHeader("content-type", "application/json");
    response.end(JSON.stringify(charge));
  }
}

/** Charge through the processor's API; the charge's id. */
export async function charge(url: string, customer: string, cents: number, key: string | null): Promise<string> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (key !== null) headers["idempotency-key"] = key;
  const response = await fetch(`${url}/charges`, { method: "POST", headers, body: JSON.stringify({ customer, cents }) });
  if (!response.ok) throw new Error(`the card processor answered ${response.status}`);
  return ((await response.json()) as { id: string }).id;
}

// -- the OpenAI Agents SDK's model ----------------------------------------------------------

/** The model responses an Agents SDK input holds: each run of items the model made (its
 * messages, tool calls, reasoning) is one response. */
function responsesIn(input: string | Record<string, unknown>[]): number {
  if (typeof input === "string") return 0;
  let responses = 0;
  let inResponse = false;
  for (const item of input) {
    const made =
      item["type"] === "function_call" ||
      item["type"] === "reasoning" ||
      ((item["type"] ?? "message") === "message" && item["role"] === "assistant");
    if (made && !inResponse) responses++;
    inResponse = made;
  }
  return responses;
}

/** An Agents SDK model answering `script` as `scriptedModel` does: answer n is the
 * script's turn after n responses of the run's history, tool calls named anew and
 * shuffled on every call; `killAtCall`: the process kills itself as its k-th call starts,
 * counted across every model of the process (`calls` shared). */
export function scriptedAgentsModel(
  script: Turn[],
  counter: { calls: number },
  killAtCall = 0,
): import("@openai/agents").Model {
  const answer = (request: import("@openai/agents").ModelRequest) => {
    counter.calls++;
    if (counter.calls === killAtCall) process.kill(process.pid, "SIGKILL");
    const turn = script[responsesIn(request.input as string | Record<string, unknown>[])] ?? [];
    const output = shuffled(turn).map(([name, args]) => ({
      type: "function_call" as const,
      callId: `call_${randomUUID().slice(0, 12)}`,
      name,
      status: "completed" as const,
      arguments: JSON.stringify(
        Object.fromEntries(Object.entries(args).map(([k, v]) => [k, Array.isArray(v) ? pick(v) : v])),
      ),
    }));
    const done = [
      {
        type: "message" as const,
        role: "assistant" as const,
        status: "completed" as const,
        content: [{ type: "output_text" as const, text: "done" }],
      },
    ];
    return {
      output: output.length > 0 ? output : done,
      usage: { requests: 1, inputTokens: 10, outputTokens: 5, totalTokens: 15 },
      responseId: `resp_${randomUUID()}`,
    };
  };
  return {
    async getResponse(request) {
      const { output, usage, responseId } = answer(request);
      const { Usage } = await import("@openai/agents");
      return { output, usage: new Usage(usage), responseId };
    },
    async *getStreamedResponse(request) {
      const response = answer(request);
      yield { type: "response_started" };
      for (const item of response.output) {
        if (item.type === "message") yield { type: "output_text_delta", delta: "done" };
        await new Promise((done) => setImmediate(done));
      }
      yield { type: "response_done", response: { id: response.responseId, usage: response.usage, output: response.output } };
    },
  };
}
