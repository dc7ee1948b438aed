/**
 * The one error the client rejects with: the gRPC status code, and the reason
 * and failure class from the status's google.rpc.ErrorInfo (domain "actonce").
 */
import { type ServiceError, status } from "@grpc/grpc-js";

import { BadRequest, ErrorInfo } from "./gen/google/rpc/error_details.js";
import { Status } from "./gen/google/rpc/status.js";

export const DOMAIN = "actonce";

/**
 * What the caller does with an error:
 * - REFUSED: the call was wrong; hand it to the model, which can correct it.
 * - RETRYABLE: fail the attempt; the run is retried, derived ids make that safe.
 * - PERMANENT: the run fails; retrying cannot help.
 * - UNKNOWN: the outcome is not known; never retry automatically.
 */
export type FailureClass = "REFUSED" | "RETRYABLE" | "PERMANENT" | "UNKNOWN";

const FAILURE_CLASSES: readonly string[] = ["REFUSED", "RETRYABLE", "PERMANENT", "UNKNOWN"];

/** One bad field of a request. */
export interface FieldViolation {
  field: string;
  description: string;
}

export class ActonceError extends Error {
  override readonly name = "ActonceError";

  constructor(
    message: string,
    readonly code: status,
    readonly reason: string,
    readonly failureClass: FailureClass,
    readonly metadata: Readonly<Record<string, string>> = {},
    readonly violations: readonly FieldViolation[] = [],
  ) {
    super(`${reason} (${failureClass}): ${message}`);
  }

  /** Hand it to the model: it can correct the call. */
  get refused(): boolean {
    return this.failureClass === "REFUSED";
  }

  /** Fail the attempt; the queue retries the run. */
  get retryable(): boolean {
    return this.failureClass === "RETRYABLE";
  }

  /** The run fails, with no retry. */
  get permanent(): boolean {
    return this.failureClass === "PERMANENT";
  }

  /** The outcome is not known: never retry automatically. */
  get unknown(): boolean {
    return this.failureClass === "UNKNOWN";
  }
}

const ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo";
const BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest";

/**
 * The ActonceError for a failed call. A status with no ErrorInfo came from
 * the transport: UNAVAILABLE (after the channel's own retries) and
 * DEADLINE_EXCEEDED are retryable, since derived ids make a retried run safe;
 * anything else is unknown.
 */
export function fromServiceError(error: ServiceError): ActonceError {
  let reason = status[error.code] ?? "UNKNOWN";
  let failureClass: FailureClass =
    error.code === status.UNAVAILABLE || error.code === status.DEADLINE_EXCEEDED ? "RETRYABLE" : "UNKNOWN";
  let metadata: Record<string, string> = {};
  const violations: FieldViolation[] = [];
  const [details] = error.metadata?.get("grpc-status-details-bin") ?? [];
  if (details instanceof Buffer) {
    for (const any of Status.decode(details).details) {
      if (any.typeUrl === ERROR_INFO) {
        const info = ErrorInfo.decode(any.value);
        if (info.domain !== DOMAIN) continue;
        reason = info.reason;
        metadata = info.metadata;
        const given = info.metadata["failure_class"] ?? "";
        failureClass = FAILURE_CLASSES.includes(given) ? (given as FailureClass) : "UNKNOWN";
      } else if (any.typeUrl === BAD_REQUEST) {
        for (const v of BadRequest.decode(any.value).fieldViolations) {
          violations.push({ field: v.field, description: v.description });
        }
      }
    }
  }
  return new ActonceError(error.details, error.code, reason, failureClass, metadata, violations);
}
