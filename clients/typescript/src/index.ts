/** TypeScript client of the actonce sidecar: every write of an agent's run lands once. */
export {
  type Artifact,
  Attempt,
  Client,
  type ClientOptions,
  type Counts,
  DEFAULT_TIMEOUT_MS,
  type Effect,
  type Message,
  newRequestId,
  type Outcome,
  type ProposeOptions,
  RawJson,
  rawJson,
  type Run,
  type Step,
  type Write,
  type WriteOptions,
} from "./client.js";
export { ActonceError, type FailureClass, type FieldViolation } from "./errors.js";
export * as ids from "./ids.js";
export { API_TOKEN_ENV, API_TOKEN_FILE_ENV } from "./token.js";
