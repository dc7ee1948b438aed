/**
 * The one error the client rejects with: the gRPC status code, and the reason
 * and failure class from the status's google.rpc.ErrorInfo (domain "actonce").
 */
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
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
    /** The request_id the write was sent with ("" for a call that is not a write).
     * Repeating the write with it, in the same attempt, gets the first answer back. */
    readonly requestId: string = "",
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

const ERROR_INFO = "google.rpc.ErrorInfo";
const BAD_REQUEST = "google.rpc.BadRequest";

// A status without the sidecar's ErrorInfo came from the transport. A retried
// run is safe after these, since derived ids make each write once.
const RETRYABLE_TRANSPORT_CODES: readonly status[] = [status.UNAVAILABLE, status.DEADLINE_EXCEEDED, status.CANCELLED];

class Malformed extends Error {}

/**
 * The ActonceError for a failed call. It never throws, whatever the status
 * holds: it runs inside grpc-js's callback, where a throw would crash the
 * process. One table decides, the same in every client (docs/status-cases.md):
 *
 * 1. details (grpc-status-details-bin) that do not decode, whose code is not
 *    the call's, or whose ErrorInfo or BadRequest does not decode: a malformed
 *    status; the code's name is the reason, the class UNKNOWN;
 * 2. an ErrorInfo of domain "actonce": its reason, and its failure_class when
 *    it is exactly one of the four classes, else UNKNOWN;
 * 3. no such ErrorInfo, a status from the transport: the code's name is the
 *    reason; UNAVAILABLE (after the channel's own retries), DEADLINE_EXCEEDED
 *    and a CANCELLED the caller did not cause are RETRYABLE, anything else
 *    UNKNOWN.
 *
 * A CANCELLED the caller did not cause is safe to retry: a sidecar never acts
 * on a call it did not dispatch (a draining one answers SHUTTING_DOWN), and a
 * write that may have landed stays bound to its request_id, so repeating it
 * with that request_id gets the first answer, and a retried run finds it by
 * its derived id.
 */
export function fromServiceError(error: ServiceError, requestId = "", callerCancelled = false): ActonceError {
  const code = typeof error.code === "number" ? error.code : status.UNKNOWN;
  const codeName = status[code] ?? "UNKNOWN";
  const message = typeof error.details === "string" ? error.details : String(error.message ?? "");
  try {
    const { info, violations } = decode(code, error.metadata?.get("grpc-status-details-bin") ?? []);
    if (info !== undefined) {
      const given = info.metadata["failure_class"] ?? "";
      const failureClass = FAILURE_CLASSES.includes(given) ? (given as FailureClass) : "UNKNOWN";
      return new ActonceError(message, code, info.reason, failureClass, info.metadata, violations, requestId);
    }
    const retryable =
      RETRYABLE_TRANSPORT_CODES.includes(code) && !(code === status.CANCELLED && callerCancelled);
    return new ActonceError(message, code, codeName, retryable ? "RETRYABLE" : "UNKNOWN", {}, violations, requestId);
  } catch {
    return new ActonceError(message, code, codeName, "UNKNOWN", {}, [], requestId);
  }
}

/** The sidecar's ErrorInfo and the field violations in a status's details; throws Malformed. */
function decode(
  code: status,
  values: readonly unknown[],
): { info: ErrorInfo | undefined; violations: FieldViolation[] } {
  const violations: FieldViolation[] = [];
  if (values.length === 0) return { info: undefined, violations };
  const [raw] = values;
  if (values.length > 1 || !(raw instanceof Uint8Array)) throw new Malformed();
  const decoded = Status.decode(strict(raw, STATUS));
  if (decoded.code !== code) throw new Malformed();
  let info: ErrorInfo | undefined;
  for (const any of decoded.details) {
    const name = any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1);
    if (name === ERROR_INFO) {
      const found = ErrorInfo.decode(strict(any.value, ERROR_INFO_FIELDS));
      if (found.domain === DOMAIN && info === undefined) info = found;
    } else if (name === BAD_REQUEST) {
      for (const v of BadRequest.decode(strict(any.value, BAD_REQUEST_FIELDS)).fieldViolations) {
        violations.push({ field: v.field, description: v.description });
      }
    }
  }
  return { info, violations };
}

/**
 * A message's fields that hold messages, by number, each with its own: the shape the
 * well-formedness walk below follows into them (google/rpc/status.proto, error_details.proto).
 */
type Shape = { readonly [field: number]: Shape };
const LEAF: Shape = {};
const STATUS: Shape = { 3: LEAF }; // details: Any, whose value is decoded as its type
const ERROR_INFO_FIELDS: Shape = { 3: LEAF }; // metadata: map entries
const BAD_REQUEST_FIELDS: Shape = { 1: { 4: LEAF } }; // field_violations, localized_message

const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * A reader of bytes that protobuf's other runtimes would decode as a message of `shape`;
 * throws where they refuse it. Written here because ts-proto's decoders are lenient where
 * the others are not: they stop at a tag numbered 0 or at an end-group tag and keep what
 * they read, and they read a string that is not UTF-8 as replacement characters. The
 * walk checks every tag, length and group, into every message field; the reader it returns
 * refuses a string that is not UTF-8.
 */
function strict(bytes: Uint8Array, shape: Shape): BinaryReader {
  const walk = (reader: BinaryReader, fields: Shape): void => {
    while (reader.pos < reader.len) {
      const [field, type] = reader.tag(); // throws on field 0 and on wire types 6 and 7
      const inner = fields[field];
      if (inner !== undefined && type === WireType.LengthDelimited) walk(new BinaryReader(reader.bytes()), inner);
      else reader.skip(type, field); // throws on a lone end-group, an unmatched group, a short read
    }
  };
  walk(new BinaryReader(bytes), shape);
  return new BinaryReader(bytes, (text) => UTF8.decode(text));
}
