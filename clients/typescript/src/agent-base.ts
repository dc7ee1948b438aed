/**
 * What every framework's integration holds in common (the AI SDK's, the OpenAI Agents SDK's,
 * LangGraph.js's, Mastra's): the client and rule its deliveries run under, one call of a tool
 * as a scoped attempt of the delivery with the tool's retries, and the delivery a durable
 * model's turn is recorded in. Each integration adds only what its framework needs: how it
 * names a tool call and cancels it, how its model's request is keyed and its answer recorded.
 */
import type { Client } from "./client.js";
import {
  currentDelivery,
  deliver,
  type DeliverOptions,
  type Delivery,
  type Parked,
  runToolCall,
  type ToolCall,
} from "./deliveries.js";

export interface ActonceOptions {
  /** The automation the runs belong to. */
  rule: string;
  /** Each tool call's attempt's lease, in milliseconds from its start (default: the delivery's). */
  leaseMs?: number;
}

/** How a tool's call is tried again. */
export interface ToolRetries {
  /** Tries after the first, after a RETRYABLE actonce error or a `transient` one (default 0). */
  retries?: number;
  /** Whether an error of the tool's own downstream calls is worth another try. */
  transient?: (error: unknown) => boolean;
}

/** The delivery a durable model's call is a turn of; an error outside one, where `runs` says
 * what to run inside `deliver()`. */
export function turnDelivery(runs = "the agent"): Delivery {
  const delivery = currentDelivery();
  if (delivery === undefined) {
    throw new Error(`a durable model called outside a delivery: run ${runs} inside deliver()`);
  }
  return delivery;
}

/**
 * A framework's side of actonce: its client and rule, and its tools' calls, each a scoped
 * attempt of the current delivery named by the framework's tool-call id.
 */
export class AgentIntegration {
  constructor(
    readonly client: Client,
    readonly options: ActonceOptions,
  ) {}

  /** One call of a tool (`runToolCall`), tried as `retry` says, in an attempt with the
   * integration's lease, cancelled by the framework's `signal`. */
  protected callTool<T>(
    toolCallId: string,
    retry: ToolRetries,
    signal: AbortSignal | undefined,
    body: (call: ToolCall) => Promise<T>,
  ): Promise<T> {
    const { retries, transient } = retry;
    return runToolCall(toolCallId, body, { retries, transient, leaseMs: this.options.leaseMs, signal });
  }

  /** One delivery of the queue's run `runId` under the integration's rule. */
  protected deliverRun<T>(
    runId: string,
    body: (delivery: Delivery) => Promise<T>,
    options: Omit<DeliverOptions, "runId" | "rule">,
  ): Promise<T | Parked> {
    return deliver(this.client, { ...options, runId, rule: this.options.rule }, body);
  }
}

/**
 * An integration whose framework runs an agent in one call (the AI SDK, the Agents SDK,
 * Mastra): its tool calls' ids are the model's, so every delivery needs durable model turns.
 */
export class TurnsIntegration extends AgentIntegration {
  /**
   * Run one delivery of the queue's run `runId` (see `deliver` of `@actonce/client`): `body`
   * runs the agent, with `delivery.signal` as its cancellation. Answers `body`'s result, or
   * `Parked`; throws what ended the delivery, for the queue.
   */
  deliver<T>(
    runId: string,
    body: (delivery: Delivery) => Promise<T>,
    options: Omit<DeliverOptions, "runId" | "rule"> = {},
  ): Promise<T | Parked> {
    return this.deliverRun(runId, body, { needsTurns: true, ...options });
  }
}
