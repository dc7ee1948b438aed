/**
 * Mastra on actonce (`@actonce/client/mastra`; Mastra declares Node 22.13 in its engines).
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

import { type ToolRetries, TurnsIntegration } from "./agent-base.js";
import { type DurableModelOptions, durableModel, type WrappableModel } from "./ai-sdk.js";
import type { ToolCall } from "./deliveries.js";

type CreateToolOptions = Parameters<typeof createTool>[0];
/** A model as a Mastra agent takes it. */
export type MastraModel = ConstructorParameters<typeof Agent>[0]["model"];
type MastraContext = Parameters<NonNullable<CreateToolOptions["execute"]>>[1];

/** A Mastra tool whose `execute` takes the tool call's `ToolCall` besides its input. */
export interface ActonceMastraTool<INPUT, OUTPUT> extends ToolRetries {
  id: string;
  description: string;
  inputSchema: CreateToolOptions["inputSchema"];
  outputSchema?: CreateToolOptions["outputSchema"];
  requireApproval?: boolean;
  execute: (input: INPUT, call: ToolCall, context: MastraContext) => Promise<OUTPUT>;
}

/** Mastra's side of actonce: deliveries, the AI SDK integration's durable models, and Mastra
 * tools. `deliver(runId, body)`: `body` runs the agent, with `delivery.signal` as its
 * `abortSignal`. */
export class Actonce extends TurnsIntegration {
  /** `model` (an AI SDK model, as Mastra's are) with every call a durable model turn. */
  model(model: WrappableModel, options: DurableModelOptions = {}): MastraModel {
    // Mastra names its own copy of the AI SDK's provider types: the same model, another type.
    return durableModel(model, options) as unknown as MastraModel;
  }

  /**
   * A Mastra tool (`createTool`) whose every call is a scoped attempt of the delivery, named
   * by the tool call's id (`context.agent.toolCallId`); `execute` gets its `ToolCall`. A
   * refusal is thrown for Mastra to hand to the model; any other error also ends the
   * delivery, which asks the model nothing more and throws it out of `deliver`.
   */
  tool<INPUT, OUTPUT>(definition: ActonceMastraTool<INPUT, OUTPUT>): ReturnType<typeof createTool> {
    const { execute, retries, transient, ...rest } = definition;
    return createTool({
      ...rest,
      execute: (input: unknown, context: MastraContext) =>
        this.callTool(context?.agent?.toolCallId ?? "", { retries, transient }, context?.abortSignal, (call) =>
          execute(input as INPUT, call, context),
        ),
    } as CreateToolOptions);
  }
}

export { deliver, durableModel, Parked, type ParkedItem, ToolCall } from "./ai-sdk.js";
