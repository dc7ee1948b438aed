/**
 * One delivery of a queue's job: an unscoped attempt of its run, the model turns it
 * records, the tool calls that belong to it, and what parks it. The same model as the
 * Python client's `actonce_client.deliveries`.
 *
 * A queue delivers a job at least once: a worker that dies, or whose lease (the queue's
 * visibility timeout) runs out, has the job delivered again. Each delivery begins an
 * unscoped attempt of the job's run, and every tool call of the delivery begins a scoped
 * attempt that names it (`deliveryAttemptId`). Beginning a newer delivery fences the older
 * one's tool calls in the sidecar's ledger, so a worker that lost its lease, however late
 * it wakes, writes nothing; a heartbeat moves the delivery's lease while the agent thinks.
 *
 * **Durable model turns.** A model names its tool calls anew on every call, so a delivery
 * that asked the model again would make new tool calls, and every write they make would
 * be a new write. Each model response is recorded as a step of the delivery's attempt
 * (tool `model_turn`, keyed by what was asked), and a later delivery that asks the same
 * replays the recorded response: the same tool calls, with the same ids, so the same
 * writes, found once. A response is recorded before anything acts on it.
 *
 * **Error routing.** A refusal (REFUSED) goes back to the model, which can correct the
 * call; any other error ends the delivery for the queue (it is thrown out of `deliver`);
 * an item in doubt (UNKNOWN: a step that may have acted, an audit not stored) parks it:
 * `deliver` answers `Parked`, and the job waits for `actonce audit resolve`.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { status } from "@grpc/grpc-js";

import { type Attempt, type CallOptions, type Client, type Effect, rawJson } from "./client.js";
import { ActonceError } from "./errors.js";
import { checkJson } from "./inputs.js";

/** The tool name a delivery records its model turns under. */
export const MODEL_TURN = "model_turn";
/** The largest model response a turn records, as UTF-8 JSON text: the sidecar's limit for a
 * step's result_json (1 MiB, nested at most 64 levels deep). */
export const MAX_RECORDED_BYTES = 1 << 20;
/** Milliseconds a delivery that is done waits at most for its tool calls still running. */
export const TOOLS_SETTLE_MS = 30_000;

const current = new AsyncLocalStorage<Delivery>();

/** A model response larger than a turn can record: refused before anything acts on it. */
export class ModelResponseTooLarge extends ActonceError {
  constructor(description: string) {
    super(`result_json: ${description}`, status.INVALID_ARGUMENT, "INVALID_ARGUMENT", "REFUSED", {}, [
      { field: "result_json", description },
    ]);
  }
}

/** What needs a person: a step or write of the run (its id), and why. */
export interface ParkedItem {
  id: string;
  tool: string;
  reason: string;
  message: string;
}

/** A delivery that stopped on items in doubt: park or dead-letter the job, and deliver it
 * again once `actonce audit resolve` decided each item. */
export class Parked {
  constructor(
    readonly runId: string,
    readonly items: readonly ParkedItem[],
  ) {}
}

/** The item an UNKNOWN error leaves to a person, or undefined for any other error. */
export function parkedItem(error: ActonceError): ParkedItem | undefined {
  if (error.failureClass !== "UNKNOWN") return undefined;
  const id = error.metadata["step_id"] || error.metadata["derived_id"] || error.requestId;
  return { id, tool: error.metadata["tool"] ?? "", reason: error.reason, message: error.message };
}

/** The ActonceError a framework's error carries (thrown, its cause, or among an
 * AggregateError's errors), or undefined. */
export function actonceCause(error: unknown): ActonceError | undefined {
  const seen = new Set<unknown>();
  const stack: unknown[] = [error];
  while (stack.length > 0) {
    const found = stack.pop();
    if (found === null || typeof found !== "object" || seen.has(found)) continue;
    seen.add(found);
    if (found instanceof ActonceError) return found;
    if (found instanceof AggregateError) stack.push(...found.errors);
    // The frameworks wrap a tool's error as `cause` (Error's own), or as `error`.
    const { cause, error: inner } = found as { cause?: unknown; error?: unknown };
    stack.push(cause, inner);
  }
  return undefined;
}

/** What the model is told of a REFUSED call (bad input, an artifact not found), which it
 * can correct; undefined for every other error, which is not the model's. */
export function refusedMessage(error: unknown): string | undefined {
  const cause = actonceCause(error);
  return cause?.refused ? `refused: ${cause.reason}: ${cause.message}` : undefined;
}

/** Whether a retry of a tool call is safe and may help: a RETRYABLE actonce error. Never
 * IN_DOUBT (UNKNOWN), FORBIDDEN (PERMANENT) or a refusal. */
export function isRetryable(error: unknown): boolean {
  return error instanceof ActonceError && error.retryable;
}

/** Whether another try of a tool call may help: a RETRYABLE actonce error, but not
 * ATTEMPT_FENCED. A fenced try's delivery was fenced by a newer one, and every later try
 * of it would be fenced again: the fence ends the delivery, and the newer one goes on. */
export function retryMayHelp(error: unknown): boolean {
  return isRetryable(error) && (error as ActonceError).reason !== "ATTEMPT_FENCED";
}

/** How a framework's model response is recorded as JSON, and read back. */
export interface Codec<T> {
  encode(response: T): unknown;
  decode(recorded: unknown): T;
}

/** A model response's JSON text as a turn records it; ModelResponseTooLarge if it is beyond
 * what the sidecar keeps. */
export function recordable(response: unknown): string {
  const text = JSON.stringify(response);
  if (text === undefined) throw new ModelResponseTooLarge("the model's response has no JSON form");
  const size = Buffer.byteLength(text, "utf8");
  if (size > MAX_RECORDED_BYTES) {
    throw new ModelResponseTooLarge(
      `the model's response is ${size} bytes as JSON; a recorded model turn holds at most ` +
        `${MAX_RECORDED_BYTES}: refused before anything acted on it`,
    );
  }
  try {
    checkJson(text, "result_json");
  } catch (refused) {
    throw new ModelResponseTooLarge((refused as ActonceError).violations[0]?.description ?? String(refused));
  }
  return text;
}

/** The queue's lease on a delivery: when it ends, and the worker's heartbeat that extends
 * it (answering the new deadline, or undefined once the queue took the job back), called
 * every `heartbeatEveryMs` (default: a third of the lease left). */
export interface Lease {
  leaseDeadline?: Date;
  heartbeat?: () => Date | undefined | Promise<Date | undefined>;
  heartbeatEveryMs?: number;
}

/** A heartbeat's period: a third of the lease left, so two beats may fail in time. */
export function everyDefault(deadline: Date): number {
  return Math.max((deadline.getTime() - Date.now()) / 3, 50);
}

/** Moves the delivery's lease while the agent thinks; stops at the first failure or at an
 * answer of undefined, and then the delivery's signal aborts: its lease will run out. */
export class Heartbeat {
  beats = 0;
  error: unknown = undefined;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #beating: Promise<void> = Promise.resolve();

  constructor(
    private readonly attempt: Attempt,
    private readonly extend: () => Date | undefined | Promise<Date | undefined>,
    private readonly everyMs: number,
    private readonly lost: (why: unknown) => void,
  ) {}

  start(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => (this.#beating = this.#beat()), this.everyMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#beating;
  }

  async #beat(): Promise<void> {
    try {
      const deadline = await this.extend();
      if (this.#stopped) return;
      if (deadline === undefined) {
        this.lost(new Error("the queue took the job back: the lease is not extended"));
        return;
      }
      await this.attempt.extendLease(deadline);
      this.beats++;
      this.start();
    } catch (error) {
      this.error = error;
      if (!this.#stopped) this.lost(error);
    }
  }
}

export interface ToolAttemptOptions {
  /** The tool call's attempt's lease, in milliseconds from its start (default: the delivery's). */
  leaseMs?: number;
  checkpoint?: string;
}

/**
 * One delivery of a run: its attempt, its model turns, its tool calls' attempts. Made by
 * `deliver`; a tool or model wrapper finds the delivery it runs in with `currentDelivery()`.
 */
export class Delivery {
  /** Model turns asked for or replayed in this delivery. */
  turns = 0;
  /** Items in doubt its tool calls met. */
  readonly inDoubt: ParkedItem[] = [];
  #failure: unknown = undefined;
  #failed = false;
  readonly #controller = new AbortController();
  readonly #tools = new Set<Promise<unknown>>();

  constructor(
    readonly client: Client,
    readonly attempt: Attempt,
    /** Whether a tool call needs a recorded model turn before it (its id is the model's). */
    readonly needsTurns = false,
    readonly leaseDeadline: Date | undefined = undefined,
  ) {}

  get runId(): string {
    return this.attempt.run.runId;
  }

  get rule(): string {
    return this.attempt.run.rule;
  }

  /** Aborts when the delivery must stop: a tool call failed for the queue, the heartbeat
   * lost the lease, or the caller's own signal aborted. Hand it to the framework
   * (`abortSignal`) so that it stops calling the model. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** @internal */
  abort(reason: unknown): void {
    if (!this.#controller.signal.aborted) this.#controller.abort(reason);
  }

  // -- model turns --------------------------------------------------------------------

  /** The model's response for the turn `key`: recorded, or asked for and recorded. A
   * delivery that already failed asks no model. */
  async turn<T>(key: Record<string, unknown>, call: () => Promise<T>, codec: Codec<T>): Promise<T> {
    this.throwIfFailed();
    const begun = await this.attempt.beginStep(MODEL_TURN, "IDEMPOTENT_WRITE", key);
    this.turns++;
    if (begun.done) return codec.decode(begun.result);
    let text: string;
    try {
      text = recordable(codec.encode(await call()));
    } catch (error) {
      // A model that did not answer, or an answer refused, acted on nothing.
      await this.attempt.abortStep(begun.id, "the model's answer was not recorded").catch(() => undefined);
      throw error;
    }
    await this.attempt.endStep(begun.id, rawJson(text));
    return codec.decode(JSON.parse(text));
  }

  // -- tool calls ---------------------------------------------------------------------

  /** The attempt of one try of a tool call of this delivery, scoped to its id; begun with the
   * delivery's capability, so an agent that holds no API token may begin it. */
  async beginTool(scope: string, options: ToolAttemptOptions = {}, call: CallOptions = {}): Promise<Attempt> {
    this.requireTurns();
    const leaseDeadline =
      options.leaseMs === undefined ? this.leaseDeadline : new Date(Date.now() + options.leaseMs);
    return this.attempt.beginScoped(
      {
        runId: this.runId,
        rule: this.rule,
        checkpoint: options.checkpoint ?? "",
        scope,
        leaseDeadline,
      },
      call,
    );
  }

  /** Run `body` as one tool call of this delivery: the delivery ends only once it did. */
  toolRunning<T>(body: () => Promise<T>): Promise<T> {
    const running = body();
    const settled = running.then(
      () => undefined,
      () => undefined,
    );
    this.#tools.add(settled);
    void settled.then(() => this.#tools.delete(settled));
    return running;
  }

  /** Wait until no tool call of this delivery is running, `ms` at most; whether none is.
   * A framework that stops a run at one tool call's error may leave the others running:
   * their steps, which may have acted, end before the delivery does. */
  async waitForTools(ms = TOOLS_SETTLE_MS): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<false>((done) => (timer = setTimeout(() => done(false), ms)));
    try {
      while (this.#tools.size > 0) {
        const all = Promise.all([...this.#tools]).then(() => true as const);
        if (!(await Promise.race([all, limit]))) return false;
      }
      return true;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Refuse a tool call that no recorded model turn named, where ids need one. */
  requireTurns(): void {
    if (this.needsTurns && this.turns === 0) {
      throw new Error(
        "a tool call before any recorded model turn: its id is new on every delivery, and so " +
          "would be its writes. Call the model through actonce's durable model",
      );
    }
  }

  /** Note an error a tool call raised: an item in doubt parks the delivery. */
  saw(error: unknown): void {
    const cause = actonceCause(error);
    const item = cause === undefined ? undefined : parkedItem(cause);
    if (item !== undefined && !this.inDoubt.some((i) => i.id === item.id && i.reason === item.reason)) {
      this.inDoubt.push(item);
    }
  }

  /** A tool call's error that is not the model's to correct: it ends the delivery (its first
   * such error is what `deliver` throws, unless an item in doubt parks it), and the
   * delivery's signal aborts. A framework that hands tool errors to the model is stopped
   * at its next model call, which asks no model. */
  fail(error: unknown): void {
    this.saw(error);
    if (!this.#failed) {
      this.#failed = true;
      this.#failure = error;
    }
    this.abort(error);
  }

  /** The error a tool call ended the delivery with, if any. */
  get failure(): unknown {
    return this.#failure;
  }

  get failed(): boolean {
    return this.#failed;
  }

  /** Throw the delivery's failure, if a tool call failed it. */
  throwIfFailed(): void {
    if (this.#failed) throw this.#failure;
  }

  /** The delivery's Parked answer if an item is in doubt (`error`'s too), else undefined. */
  parked(error?: unknown): Parked | undefined {
    if (error !== undefined) this.saw(error);
    return this.inDoubt.length > 0 ? new Parked(this.runId, [...this.inDoubt]) : undefined;
  }
}

/** The delivery the calling code runs in, if any. */
export function currentDelivery(): Delivery | undefined {
  return current.getStore();
}

export interface DeliverOptions extends Lease {
  /** The queue's run: the same for every delivery of the job. */
  runId: string;
  /** The automation the run belongs to. */
  rule: string;
  /** The caller's own stop: aborts the delivery's signal. */
  signal?: AbortSignal;
  /** Refuse a tool call before any recorded model turn (a framework with no checkpointer). */
  needsTurns?: boolean;
  /**
   * The delivery's attempt, when a harness began it and handed it over (its id, run and
   * capability: `client.attempt(...)`): an agent that holds no API token, only that
   * attempt's capability, delivers in it and begins its tool calls under it. Without it,
   * `deliver` begins the delivery's attempt itself, which needs the API token.
   */
  attempt?: Attempt;
}

/** The delivery's attempt a harness began and handed over, checked against the run. */
function handed(given: Attempt, runId: string, rule: string): Attempt {
  const { run } = given;
  const scope = run.scope ?? "";
  if (run.runId !== runId || run.rule !== rule || scope !== "") {
    throw new TypeError(
      `the attempt handed over is of run ${JSON.stringify(run.runId)} (rule ${JSON.stringify(run.rule)}, ` +
        `scope ${JSON.stringify(scope)}): a delivery of run ${JSON.stringify(runId)} needs an unscoped attempt of it`,
    );
  }
  return given;
}

/**
 * Run one delivery of the queue's run: begin its attempt (which fences every older
 * delivery's tool calls), or take the one a harness handed over (`attempt`), run `body` inside it (its tools' attempts name it, its model
 * turns are recorded in it, the heartbeat moves its lease meanwhile), wait for its tool
 * calls, and end its attempt (a fenced delivery's end is refused, and left: the newer
 * delivery goes on).
 *
 * Answers `body`'s result; `Parked` when the run has an item in doubt; throws the error
 * that ended the delivery (a tool call's, even one the framework handed to the model
 * instead of throwing it), for the queue to deliver the job again or dead-letter it.
 */
export async function deliver<T>(
  client: Client,
  options: DeliverOptions,
  body: (delivery: Delivery) => Promise<T>,
): Promise<T | Parked> {
  const { runId, rule, leaseDeadline, heartbeat, heartbeatEveryMs, signal, needsTurns } = options;
  signal?.throwIfAborted();
  const attempt =
    options.attempt === undefined
      ? await client.begin({ runId, rule, leaseDeadline }, { signal })
      : handed(options.attempt, runId, rule);
  const delivery = new Delivery(client, attempt, needsTurns ?? false, leaseDeadline);
  const onAbort = () => delivery.abort(signal?.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  let beating: Heartbeat | undefined;
  if (heartbeat !== undefined) {
    if (leaseDeadline === undefined) throw new TypeError("a heartbeat extends a lease: give the leaseDeadline");
    beating = new Heartbeat(attempt, heartbeat, heartbeatEveryMs ?? everyDefault(leaseDeadline), (why) =>
      delivery.abort(why),
    );
    beating.start();
  }
  let outcome: { value: T } | { error: unknown };
  try {
    outcome = { value: await current.run(delivery, () => body(delivery)) };
  } catch (error) {
    outcome = { error };
  } finally {
    signal?.removeEventListener("abort", onAbort);
    await delivery.waitForTools();
    await beating?.stop();
    await endQuietly(attempt);
  }
  const thrown = "error" in outcome ? outcome.error : undefined;
  const parked = delivery.parked(thrown);
  if (parked !== undefined) return parked;
  // A tool call's failure is the delivery's, whatever the framework made of it.
  if (delivery.failed) throw delivery.failure;
  if ("error" in outcome) throw outcome.error;
  return outcome.value;
}

/** End a try that failed, or a delivery. The tool's own error is the one to throw: a fenced
 * or unknown attempt cannot be ended, and a later try begins its own anyway. */
export async function endQuietly(attempt: Attempt): Promise<void> {
  try {
    await attempt.end();
  } catch (error) {
    if (!(error instanceof ActonceError)) throw error;
  }
}

// -- tool calls and steps -------------------------------------------------------------

const NOT_SENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "ERR_INVALID_URL"]);

/**
 * Whether an error says its request was never sent: a connection refused, a name that
 * does not resolve (Node's codes, on the error or its causes, as `fetch` wraps them). A
 * step whose call fails so is aborted, and a later try makes it.
 */
export function notSent(error: unknown): boolean {
  const seen = new Set<unknown>();
  let found: unknown = error;
  while (found !== null && typeof found === "object" && !seen.has(found)) {
    seen.add(found);
    const { code, cause } = found as { code?: unknown; cause?: unknown };
    if (typeof code === "string" && NOT_SENT_CODES.has(code)) return true;
    found = cause;
  }
  return false;
}

export interface StepOptions {
  /** What the call does to the world (default NON_IDEMPOTENT_WRITE: a step that began and
   * never ended is IN_DOUBT, for a person). IDEMPOTENT_WRITE: made again under the same key. */
  effect?: Effect;
  /** Whether `call`'s error proves it did not act (default `notSent`): the step is then
   * aborted, and a later try makes it. Any other error leaves the step begun. */
  notMade?: (error: unknown) => boolean;
}

/**
 * One try of one tool call: its attempt, and the steps it brackets. A tool of an
 * integration receives it; the model never sees it.
 */
export class ToolCall {
  constructor(
    /** The attempt this try of the tool call writes with. */
    readonly attempt: Attempt,
    /** The framework's id of the tool call: the attempt's scope. */
    readonly toolCallId: string,
    /** Aborts when the delivery must stop, or the framework cancels the call. */
    readonly signal: AbortSignal = new AbortController().signal,
  ) {}

  /**
   * `call(idempotencyKey, signal)`, made at most once across the run's tries.
   *
   * `tool` and `args` name the call (with the scope, they derive the step's id, which is
   * the idempotency key handed to `call`). When an earlier try ended the step, its
   * recorded result is returned and `call` is not made; `call`'s result is recorded, so it
   * must be JSON. The step begins when the call is about to be sent, so a kill elsewhere
   * leaves it begun only if it may have acted; it is aborted when the call is known not
   * sent (the signal aborted before it, or `notMade` says so).
   */
  async step<T>(
    tool: string,
    args: unknown,
    call: (idempotencyKey: string, signal: AbortSignal) => Promise<T>,
    options: StepOptions = {},
  ): Promise<T> {
    const { effect = "NON_IDEMPOTENT_WRITE", notMade = notSent } = options;
    this.signal.throwIfAborted();
    const begun = await this.attempt.beginStep(tool, effect, args);
    if (begun.done) return begun.result as T;
    if (this.signal.aborted) {
      await this.attempt.abortStep(begun.id, "cancelled before the call");
      this.signal.throwIfAborted();
    }
    let result: T;
    try {
      result = await call(begun.id, this.signal);
    } catch (error) {
      if (notMade(error)) {
        const name = error instanceof Error ? error.name : typeof error;
        await this.attempt.abortStep(begun.id, `not made: ${name}`);
      }
      throw error;
    }
    await this.attempt.endStep(begun.id, result === undefined ? null : result);
    return result;
  }
}

export interface ToolRunOptions {
  /** Tries after the first, after a RETRYABLE actonce error or a `transient` one. */
  retries?: number;
  /** Whether an error of the tool's own downstream calls is worth another try. */
  transient?: (error: unknown) => boolean;
  /** Each try's attempt's lease, in milliseconds from its start. */
  leaseMs?: number;
  /** The framework's cancellation of the call. */
  signal?: AbortSignal;
}

/**
 * Run one tool call of the current delivery: each try a fresh attempt scoped to the tool
 * call's id and named by the delivery, ended when the tool returns. Tried again only after
 * a RETRYABLE actonce error (never ATTEMPT_FENCED: a fenced delivery is fenced again) or a
 * `transient` one. A refusal is thrown for the framework to
 * hand to the model; any other error also fails the delivery (`Delivery.fail`), whatever the
 * framework does with it.
 */
export async function runToolCall<T>(
  toolCallId: string,
  body: (call: ToolCall) => Promise<T>,
  options: ToolRunOptions = {},
): Promise<T> {
  const delivery = currentDelivery();
  if (delivery === undefined) {
    throw new Error("an actonce tool called outside a delivery: run the agent inside deliver()");
  }
  if (!toolCallId) throw new Error("the framework gave the tool call no id");
  const { retries = 0, transient = () => false, leaseMs, signal } = options;
  const signals = signal === undefined ? [delivery.signal] : [delivery.signal, signal];
  const stop = AbortSignal.any(signals);
  return delivery.toolRunning(async () => {
    for (let tries = 1; ; tries++) {
      let attempt: Attempt;
      try {
        attempt = await delivery.beginTool(toolCallId, { leaseMs }, { signal: stop });
      } catch (error) {
        if (tries <= retries && retryMayHelp(error)) continue;
        if (!refusedMessage(error)) delivery.fail(error);
        throw error;
      }
      try {
        const result = await body(new ToolCall(attempt, toolCallId, stop));
        await attempt.end();
        return result;
      } catch (error) {
        await endQuietly(attempt);
        const ours = error instanceof ActonceError;
        if (tries <= retries && (retryMayHelp(error) || (!ours && transient(error)))) continue;
        if (!refusedMessage(error)) delivery.fail(error);
        throw error;
      }
    }
  });
}
