package dev.actonce.client;

/** What a successful write did. */
public enum Outcome {
  /** The write was made now. */
  APPLIED,
  /** An earlier attempt of the run made this write. */
  ALREADY_APPLIED,
  /** The edit's value was already there; nothing changed. */
  SKIPPED,
  /**
   * The write succeeded with an outcome this client does not know (a newer sidecar's). It landed:
   * it is not an error, and must not be repeated with a fresh request_id.
   */
  UNRECOGNIZED;

  static Outcome of(dev.actonce.v1.Outcome code) {
    return switch (code) {
      case OUTCOME_APPLIED -> APPLIED;
      case OUTCOME_ALREADY_APPLIED -> ALREADY_APPLIED;
      case OUTCOME_SKIPPED -> SKIPPED;
      default -> UNRECOGNIZED;
    };
  }
}
