package dev.actonce.client;

/** What the caller does with an error. */
public enum FailureClass {
  /** The call was wrong: hand it to the model, which can correct it. */
  REFUSED,
  /** Fail the attempt; the run is retried, and derived ids make that safe. */
  RETRYABLE,
  /** The run fails; retrying cannot help. */
  PERMANENT,
  /** The outcome is not known: never retry automatically. */
  UNKNOWN
}
