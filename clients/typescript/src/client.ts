/**
 * The client: a channel to the sidecar, and one Attempt per try of a run.
 *
 * Every call has a deadline; the channel retries UNAVAILABLE (a draining
 * sidecar, an unreachable store, no connection); every write carries a fresh
 * request_id that a transport retry resends, so a repeat the sidecar already
 * answered gets the first answer back, and a write that landed is found by its
 * derived id. Failures reject with ActonceError, which carries the write's
 * request_id: repeating the write with it after an unknown outcome gets the
 * first answer back.
 */
import {
  type CallOptions as GrpcCallOptions,
  type ChannelCredentials,
  type ClientUnaryCall,
  credentials as grpcCredentials,
  Metadata,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import { randomUUID } from "node:crypto";

import { ActonceError, fromServiceError } from "./errors.js";
import { type IdScheme, VERSION_1 } from "./ids.js";
import { checkChoice } from "./inputs.js";
import { RunActionsServiceClient } from "./gen/actonce/v1/run_actions.js";
import { Outcome as OutcomeCode, ToolEffect } from "./gen/actonce/v1/types.js";
import { resolveTarget } from "./settings.js";
import { ApiToken } from "./token.js";

/** Milliseconds a call may take unless told otherwise: above the sidecar's own
 * store deadline (5 s), so a slow store reaches the caller as its own error. */
export const DEFAULT_TIMEOUT_MS = 10_000;

/**
 * The call metadata that carries an attempt's capability: every call naming an attempt sends
 * it when the attempt has one, which a sidecar started with --agent-capabilities asks for.
 */
export const CAPABILITY_METADATA = "actonce-attempt-capability";

export const SERVICE_CONFIG = JSON.stringify({
  methodConfig: [
    {
      name: [{ service: "actonce.v1.RunActionsService" }],
      retryPolicy: {
        maxAttempts: 4,
        initialBackoff: "0.1s",
        maxBackoff: "1s",
        backoffMultiplier: 2,
        retryableStatusCodes: ["UNAVAILABLE"],
      },
    },
  ],
});

/**
 * What a successful write did: made now, made by an earlier attempt, or (an
 * edit) already there. UNRECOGNIZED: it succeeded with an outcome this client
 * does not know (a newer sidecar's); it landed, so it is not an error, and must
 * not be repeated with a fresh request_id.
 */
export type Outcome = "APPLIED" | "ALREADY_APPLIED" | "SKIPPED" | "UNRECOGNIZED";

/** What one of the agent's own tool calls does to the world (ADR-111). */
export type Effect = "READ_ONLY" | "IDEMPOTENT_WRITE" | "NON_IDEMPOTENT_WRITE";

const EFFECTS: Record<Effect, ToolEffect> = {
  READ_ONLY: ToolEffect.TOOL_EFFECT_READ_ONLY,
  IDEMPOTENT_WRITE: ToolEffect.TOOL_EFFECT_IDEMPOTENT_WRITE,
  NON_IDEMPOTENT_WRITE: ToolEffect.TOOL_EFFECT_NON_IDEMPOTENT_WRITE,
};

function outcome(code: OutcomeCode): Outcome {
  switch (code) {
    case OutcomeCode.OUTCOME_APPLIED:
      return "APPLIED";
    case OutcomeCode.OUTCOME_ALREADY_APPLIED:
      return "ALREADY_APPLIED";
    case OutcomeCode.OUTCOME_SKIPPED:
      return "SKIPPED";
    default:
      return "UNRECOGNIZED";
  }
}

/** JSON text sent as it is, e.g. a model's own output; the sidecar checks it. */
export class RawJson {
  constructor(readonly text: string) {}
}

/** Mark JSON text to be sent as it is. */
export function rawJson(text: string): RawJson {
  return new RawJson(text);
}

function jsonText(value: unknown): string {
  if (value instanceof RawJson) return value.text;
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError("value has no JSON form");
  return text;
}

/** The run an attempt belongs to. */
export interface Run {
  /** The run's id, the same for every attempt of the run. */
  runId: string;
  /** The automation the run belongs to; the sidecar's send allowlist names rules. */
  rule: string;
  /** The run's last checkpoint; "" (the default) at the run's start. */
  checkpoint?: string;
  /** When the queue's lease on the run ends; writes it would not outlast are refused. */
  leaseDeadline?: Date;
  /**
   * The attempt's part of the run, stable across its retries (a tool call's id,
   * say); "" (the default) for an unscoped attempt. Fencing and derived ids are
   * per (run, scope): sibling scopes never fence each other, and the same write
   * in two scopes is two writes.
   */
  scope?: string;
  /**
   * The delivery a scoped attempt belongs to: the id of the unscoped attempt of
   * the queue's delivery of the job whose tool call it is. A newer delivery of
   * the run then fences this attempt too. "" (the default): no delivery. Not an
   * input of any derived id.
   */
  deliveryAttemptId?: string;
}

/** An attempt begun elsewhere, as a harness hands it to the agent process (Client.attempt). */
export interface AttemptOptions extends Run {
  /** The attempt's capability (Attempt.capability); none when the sidecar issues none. */
  capability?: string;
  /** The scheme version the sidecar derives the attempt's ids with (Attempt.idScheme.version;
   * default 1): only deriving ids locally reads it. */
  idSchemeVersion?: number;
}

/** What a write made: the derived id of the artifact, proposal, thread or
 * message (for a direct edit, the edited artifact's id), and its outcome. */
export interface Write {
  id: string;
  outcome: Outcome;
  /** The artifact's version after a create or an edit; 0 otherwise. */
  version: number;
}

export interface Artifact {
  id: string;
  kind: string;
  version: number;
  data: unknown;
  dataJson: string;
  archived: boolean;
}

/** One entry of a thread: kind "notice" or "message". */
export interface Message {
  id: string;
  kind: string;
  text: string;
}

/** The sidecar's answer to beginStep. When done, an earlier attempt made the call: use result. */
export interface Step {
  id: string;
  outcome: Outcome;
  done: boolean;
  result: unknown;
}

/** An attempt's writes by outcome. */
export interface Counts {
  applied: number;
  alreadyApplied: number;
  skipped: number;
  failed: number;
}

/** One call's own bounds: its deadline, and a signal that cancels it. */
export interface CallOptions {
  /** The call's deadline in milliseconds (default: the client's timeoutMs). */
  timeoutMs?: number;
  /**
   * Cancels the call when it aborts. A call cancelled before it was sent rejects at once; one
   * cancelled in flight rejects with CANCELLED of class UNKNOWN (the caller's own doing, said
   * nothing of the sidecar): a write's outcome is then unknown, and repeating it with its
   * request_id gets the first answer, if any.
   */
  signal?: AbortSignal;
}

export interface WriteOptions extends CallOptions {
  /** The call's request_id (default: a fresh one, see newRequestId). Repeat a call
   * with its first try's (ActonceError.requestId), in the same attempt, after an
   * error that left its outcome unknown, to get the first answer back. */
  requestId?: string;
}

export interface ProposeOptions extends WriteOptions {
  /** Offer the write for review instead of applying it. */
  propose?: boolean;
}

export interface KeyOptions extends WriteOptions {
  /**
   * A key of the caller's for this write (1 to 255 bytes), unique within the run and
   * checkpoint: the id derives from the key instead of the data, title or arguments, so a
   * redelivery whose data differs (a timestamp, a uuid) finds the same artifact, thread or
   * step. The same key with other data is refused with reason KEY_REUSED (REFUSED).
   */
  key?: string;
}

/** A create's options: proposed for review, keyed, or both. */
export interface CreateOptions extends ProposeOptions, KeyOptions {}

export interface ClientOptions {
  /** Deadline of every call, in milliseconds (default DEFAULT_TIMEOUT_MS). */
  timeoutMs?: number;
  /** Channel credentials; the sidecar is in the agent's pod, so plaintext by default. */
  credentials?: ChannelCredentials;
  /** The sidecar's API token (default: the file named by ACTONCE_API_TOKEN_FILE, else
   * ACTONCE_API_TOKEN, else none). */
  apiToken?: string;
  /** A file holding the API token, read again at most once a second. */
  apiTokenFile?: string;
}

type Callback<Res> = (error: ServiceError | null, response: Res) => void;
type Unary<Req, Res> = (
  request: Req,
  metadata: Metadata,
  options: Partial<GrpcCallOptions>,
  callback: Callback<Res>,
) => ClientUnaryCall;

/** A channel to one sidecar at target ("127.0.0.1:50051", "unix:///run/actonce.sock"), or,
 * without one, at ACTONCE_TARGET. A URL ("http://...") is refused at once, an ActonceError
 * (INVALID_ARGUMENT, PERMANENT) saying to write HOST:PORT (./settings.ts). */
export class Client {
  readonly #rpc: RunActionsServiceClient;
  readonly #token: ApiToken | undefined;
  readonly timeoutMs: number;
  #closed = false;

  constructor(target?: string, options: ClientOptions = {}) {
    const dialed = resolveTarget(target);
    this.#token = ApiToken.resolve(options);
    this.#rpc = new RunActionsServiceClient(dialed, options.credentials ?? grpcCredentials.createInsecure(), {
      "grpc.service_config": SERVICE_CONFIG,
    });
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /** Start one try of a run from its last checkpoint. */
  begin(run: Run, options: CallOptions = {}): Promise<Attempt> {
    return this.beginCarrying(run, options, "");
  }

  /**
   * A handle on an attempt begun elsewhere: by a harness that holds the API token and hands
   * this process the attempt's id, its run and its capability (Attempt.capability). Making it
   * calls nothing; its calls carry the capability, which is all a sidecar started with
   * --agent-capabilities asks of them.
   */
  attempt(attemptId: string, options: AttemptOptions): Attempt {
    const { capability, idSchemeVersion, ...run } = options;
    return new Attempt(this, attemptId, run, { version: idSchemeVersion ?? 1, scope: run.scope ?? "" }, capability);
  }

  /** @internal BeginAttempt, carrying a delivery's capability ("" for none). */
  async beginCarrying(run: Run, options: CallOptions, capability: string): Promise<Attempt> {
    const response = await this.call(
      this.#rpc.beginAttempt,
      {
        runId: run.runId,
        rule: run.rule,
        checkpoint: run.checkpoint ?? "",
        leaseDeadline: run.leaseDeadline,
        scope: run.scope ?? "",
        deliveryAttemptId: run.deliveryAttemptId ?? "",
      },
      options,
      capability,
    );
    // A sidecar from before scheme versions answers none: it derives version 1.
    const idScheme = { version: response.idSchemeVersion || 1, scope: run.scope ?? "" };
    return new Attempt(this, response.attemptId, run, idScheme, response.capability);
  }

  close(): void {
    this.#closed = true;
    this.#rpc.close();
  }

  /**
   * @internal One unary call with the client's deadline, its error made an
   * ActonceError carrying the request's request_id. Nothing thrown inside
   * grpc-js's callback escapes: there it would crash the process, or leave the
   * promise unsettled.
   */
  call<Req, Res>(method: Unary<Req, Res>, request: Req, options: CallOptions = {}, capability = ""): Promise<Res> {
    const given = (request as { requestId?: unknown }).requestId;
    const requestId = typeof given === "string" ? given : "";
    const { signal } = options;
    if (signal?.aborted) {
      // Never sent: nothing of it can have landed, yet the caller said stop.
      return Promise.reject(
        new ActonceError("cancelled before it was sent", status.CANCELLED, "CANCELLED", "UNKNOWN", {}, [], requestId),
      );
    }
    const metadata = new Metadata();
    if (this.#token !== undefined) metadata.set("authorization", `Bearer ${this.#token.value()}`);
    if (capability !== "") metadata.set(CAPABILITY_METADATA, capability);
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    return new Promise((resolve, reject) => {
      let cancelled = false;
      const call = method.call(this.#rpc, request, metadata, { deadline: Date.now() + timeoutMs }, (error, response) => {
        signal?.removeEventListener("abort", cancel);
        try {
          // A CANCELLED after close() or the caller's signal is the caller's own doing; any other is not.
          if (error) reject(fromServiceError(error, requestId, this.#closed || cancelled));
          else resolve(response);
        } catch (unexpected) {
          reject(new ActonceError(String(unexpected), status.UNKNOWN, "UNKNOWN", "UNKNOWN", {}, [], requestId));
        }
      });
      const cancel = (): void => {
        cancelled = true;
        call.cancel();
      };
      signal?.addEventListener("abort", cancel, { once: true });
    });
  }

  /** @internal */
  get rpc(): RunActionsServiceClient {
    return this.#rpc;
  }
}

/** One try of a run, made by Client.begin. */
export class Attempt {
  constructor(
    private readonly client: Client,
    /** The sidecar's id of this attempt. */
    readonly id: string,
    /** The run this attempt belongs to. */
    readonly run: Readonly<Run>,
    /** The scheme version the sidecar derives this attempt's ids with, and its scope (ids.deriveId). */
    readonly idScheme: IdScheme = VERSION_1,
    /**
     * The attempt's capability: the secret that lets a process holding no API token make this
     * attempt's calls, and no other's, on a sidecar started with --agent-capabilities. "" when
     * the sidecar issues none. A harness hands it, with id, to the agent process.
     */
    readonly capability: string = "",
  ) {}

  /**
   * Begin a scoped attempt (run.scope, a tool call's id say) that belongs to this attempt's
   * delivery: its deliveryAttemptId is this attempt's id, and the call carries this attempt's
   * capability, which is all a sidecar with --agent-capabilities asks of it. The new attempt has
   * its own capability; a newer delivery of the run fences it, as it fences this one.
   */
  beginScoped(run: Omit<Run, "deliveryAttemptId">, options: CallOptions = {}): Promise<Attempt> {
    return this.client.beginCarrying({ ...run, deliveryAttemptId: this.id }, options, this.capability);
  }

  /** One call naming this attempt, carrying its capability. */
  private call<Req, Res>(method: Unary<Req, Res>, request: Req, options: CallOptions): Promise<Res> {
    return this.client.call(method, request, options, this.capability);
  }

  /** Make an artifact of kind holding data, or propose it. */
  async create(kind: string, data: unknown, options: CreateOptions = {}): Promise<Write> {
    const r = await this.call(
      this.client.rpc.create,
      {
        attemptId: this.id,
        kind,
        dataJson: jsonText(data),
        propose: options.propose ?? false,
        requestId: newRequestIdUnless(options),
        key: options.key ?? "",
      },
      options,
    );
    return { id: r.id, outcome: outcome(r.outcome), version: r.version };
  }

  /** Set value at the JSON Pointer path of an artifact, or propose it; skipped when already there. */
  async edit(artifactId: string, path: string, value: unknown, options: ProposeOptions = {}): Promise<Write> {
    const propose = options.propose ?? false;
    const r = await this.call(
      this.client.rpc.edit,
      {
        attemptId: this.id,
        artifactId,
        path,
        valueJson: jsonText(value),
        propose,
        requestId: newRequestIdUnless(options),
      },
      options,
    );
    return { id: propose ? r.proposalId : artifactId, outcome: outcome(r.outcome), version: r.version };
  }

  /** Post a notice: it starts and steers no turn. */
  async notice(threadId: string, text: string, options: WriteOptions = {}): Promise<Write> {
    const r = await this.call(
      this.client.rpc.notice,
      {
        attemptId: this.id,
        threadId,
        text,
        requestId: newRequestIdUnless(options),
      },
      options,
    );
    return { id: r.messageId, outcome: outcome(r.outcome), version: 0 };
  }

  /** Post a message that asks for the thread's turn (rules on the send allowlist only). */
  async send(threadId: string, text: string, options: WriteOptions = {}): Promise<Write> {
    const r = await this.call(
      this.client.rpc.send,
      {
        attemptId: this.id,
        threadId,
        text,
        requestId: newRequestIdUnless(options),
      },
      options,
    );
    return { id: r.messageId, outcome: outcome(r.outcome), version: 0 };
  }

  /** Make a conversation thread. */
  async createThread(title: string, options: KeyOptions = {}): Promise<Write> {
    const r = await this.call(
      this.client.rpc.createThread,
      {
        attemptId: this.id,
        title,
        requestId: newRequestIdUnless(options),
        key: options.key ?? "",
      },
      options,
    );
    return { id: r.threadId, outcome: outcome(r.outcome), version: 0 };
  }

  /** An artifact as the store holds it now. */
  async readArtifact(artifactId: string, options: CallOptions = {}): Promise<Artifact> {
    const r = await this.call(this.client.rpc.read, { attemptId: this.id, artifactId }, options);
    if (r.artifact === undefined) throw new Error(`the sidecar answered no artifact for ${artifactId}`);
    const { id, kind, version, dataJson, archived } = r.artifact;
    return { id, kind, version, dataJson, data: JSON.parse(dataJson), archived };
  }

  /** A thread's messages, oldest first. */
  async readThread(threadId: string, options: CallOptions = {}): Promise<Message[]> {
    const r = await this.call(this.client.rpc.read, { attemptId: this.id, threadId }, options);
    return r.messages.map(({ id, kind, text }) => ({ id, kind, text }));
  }

  /**
   * Declare one of the agent's own tool calls before making it. A non-idempotent
   * call that began earlier and never ended is refused with IN_DOUBT (UNKNOWN).
   */
  async beginStep(tool: string, effect: Effect, args: unknown, options: KeyOptions = {}): Promise<Step> {
    const r = await this.call(
      this.client.rpc.beginStep,
      {
        attemptId: this.id,
        tool,
        effect: EFFECTS[checkChoice(effect, "effect", EFFECTS)],
        argsJson: jsonText(args),
        requestId: newRequestIdUnless(options),
        key: options.key ?? "",
      },
      options,
    );
    const stepOutcome = outcome(r.outcome);
    return {
      id: r.stepId,
      outcome: stepOutcome,
      done: stepOutcome === "ALREADY_APPLIED",
      result: r.resultJson === "" ? undefined : JSON.parse(r.resultJson),
    };
  }

  /** Record the result of a step begun with beginStep. */
  async endStep(stepId: string, result: unknown, options: WriteOptions = {}): Promise<Outcome> {
    const r = await this.call(
      this.client.rpc.endStep,
      {
        attemptId: this.id,
        stepId,
        resultJson: jsonText(result),
        requestId: newRequestIdUnless(options),
      },
      options,
    );
    return outcome(r.outcome);
  }

  /**
   * Declare that a step begun with beginStep did not act: the tool refused
   * before acting, or was never called. A later try may run it, under the same
   * step id. Only for what provably did not act; an ended step cannot be
   * aborted (STEP_ENDED), nor an aborted one ended (STEP_ABORTED).
   */
  async abortStep(stepId: string, reason = "", options: WriteOptions = {}): Promise<Outcome> {
    const r = await this.call(
      this.client.rpc.abortStep,
      {
        attemptId: this.id,
        stepId,
        reason,
        requestId: newRequestIdUnless(options),
      },
      options,
    );
    return outcome(r.outcome);
  }

  /** Move the attempt's lease deadline; resolves to the one in force. */
  async extendLease(deadline: Date, options: CallOptions = {}): Promise<Date> {
    const r = await this.call(
      this.client.rpc.extendLease,
      { attemptId: this.id, leaseDeadline: deadline },
      options,
    );
    if (r.leaseDeadline === undefined) throw new Error("the sidecar answered no lease deadline");
    return r.leaseDeadline;
  }

  /** Close the attempt; resolves to its writes by outcome. */
  async end(options: CallOptions = {}): Promise<Counts> {
    const { applied, alreadyApplied, skipped, failed } = await this.call(
      this.client.rpc.endAttempt,
      { attemptId: this.id },
      options,
    );
    return { applied, alreadyApplied, skipped, failed };
  }
}

/** A fresh request_id. Each write gets one unless it is given one: choose it
 * yourself before the first try to know it whatever happens to the call. */
export function newRequestId(): string {
  return randomUUID();
}

function newRequestIdUnless(options: WriteOptions): string {
  // One id per call; the channel's own retries resend the same request bytes.
  return options.requestId ?? newRequestId();
}
