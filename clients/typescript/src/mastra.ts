/**
 * Mastra on actonce (`@actonce/client/mastra`; Mastra needs Node 22.13).
 *
 *     const actonce = new Actonce(client, { rule: "billing" });
 *     const agent = new Agent({ id: "billing", name: "billing", instructions,
 *                               model: actonce.model(openai("gpt-5")), tools: { openTicket } });
 *     const openTicket = actonce.tool({
 *       id: "open_ticket", description: "Open a ticket", inputSchema: z.object({ title: z.string() }),
 *       execute: async ({ title }, call) => (await call.attempt.create("ticket", { title })).id,
 *     });
 *     const result = await actonce.deliver(runId, (delivery) =>
 *       agent.generate("Bill ada", { maxSteps: 10, abortSignal: delivery.signal }));
 *
 * Mastra's models are AI SDK models: `actonce.model(model)` is the AI SDK integration's
 * durable model (`@actonce/client/ai-sdk`), every call a durable model turn of the delivery.
 * `actonce.tool(...)` is Mastra's `createTool` whose every call (`context.agent.toolCallId`)
 * is a scoped attempt of the delivery, with the same error routing.
 */
import type { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";

import {
  type ActonceOptions,
  Actonce as AiSdkActonce,
  type DurableModelOptions,
  type WrappableModel,
} from "./ai-sdk.js";
import type { Client } from "./client.js";
import { type DeliverOptions, type Delivery, type Parked, runToolCall, type ToolCall } from "./deliveries.js";

type CreateToolOptions = Parameters<typeof createTool>[0];
/** A model as a Mastra agent takes it. */
export type MastraModel = ConstructorParameters<typeof Agent>[0]["model"];
type MastraContext = Parameters<NonNullable<CreateToolOptions["execute"]>>[1];

/** A Mastra tool whose `execute` takes the tool call's `ToolCall` besides its input. */
export interface ActonceMastraTool<INPUT, OUTPUT> {
  id: string;
  description: string;
  inputSchema: CreateToolOptions["inputSchema"];
  outputSchema?: CreateToolOptions["outputSchema"];
  requireApproval?: boolean;
  execute: (input: INPUT, call: ToolCall, context: MastraContext) => Promise<OUTPUT>;
  /** Tries after the first, after a RETRYABLE actonce error or a `transient` one (default 0). */
  retries?: number;
  /** Whether an error of the tool's own downstream calls is worth another try. */
  transient?: (error: unknown) => boolean;
}

/** Mastra's side of actonce: the AI SDK integration's deliveries and durable models, and Mastra tools. */
export class Actonce {
  readonly #aiSdk: AiSdkActonce;

  constructor(
    readonly client: Client,
    readonly options: ActonceOptions,
  ) {
    this.#aiSdk = new AiSdkActonce(client, options);
  }

  /** Run one delivery of the queue's run `runId`: `body` runs the agent, with
   * `delivery.signal` as its `abortSignal`. Answers `body`'s result or `Parked`; throws
   * what ended the delivery, for the queue. */
  deliver<T>(
    runId: string,
    body: (delivery: Delivery) => Promise<T>,
    options: Omit<DeliverOptions, "runId" | "rule"> = {},
  ): Promise<T | Parked> {
    return this.#aiSdk.deliver(runId, body, options);
  }

  /** `model` (an AI SDK model, as Mastra's are) with every call a durable model turn. */
  model(model: WrappableModel, options: DurableModelOptions = {}): MastraModel {
    // Mastra names its own copy of the AI SDK's provider types: the same model, another type.
    return this.#aiSdk.model(model, options) as unknown as MastraModel;
  }

  /**
   * A Mastra tool (`createTool`) whose every call is a scoped attempt of the delivery, named
   * by the tool call's id (`context.agent.toolCallId`); `execute` gets its `ToolCall`. A
   * refusal is thrown for Mastra to hand to the model; any other error also ends the
   * delivery, which asks the model nothing more and throws it out of `deliver`.
   */
  tool<INPUT, OUTPUT>(definition: ActonceMastraTool<INPUT, OUTPUT>): ReturnType<typeof createTool> {
    const { execute, retries, transient, ...rest } = definition;
    const leaseMs = this.options.leaseMs;
    return createTool({
      ...rest,
      execute: (input: unknown, context: MastraContext) => {
        const toolCallId = context?.agent?.toolCallId ?? "";
        return runToolCall(toolCallId, (call) => execute(input as INPUT, call, context), {
          retries,
          transient,
          leaseMs,
          signal: context?.abortSignal,
        });
      },
    } as CreateToolOptions);
  }
}

export { deliver, durableModel, Parked, type ParkedItem, ToolCall } from "./ai-sdk.js";
