package dev.actonce.client;

/** What a successful write did. */
public enum Outcome {
  /** The write was made now. */
  APPLIED,
  /** An earlier attempt of the run made this write. */
  ALREADY_APPLIED,
  /** The edit's value was already there; nothing changed. */
  SKIPPED;

  static Outcome of(dev.actonce.v1.Outcome code) {
    return switch (code) {
      case OUTCOME_APPLIED -> APPLIED;
      case OUTCOME_ALREADY_APPLIED -> ALREADY_APPLIED;
      case OUTCOME_SKIPPED -> SKIPPED;
      default -> throw new IllegalStateException("the sidecar answered an unknown outcome: " + code);
    };
  }
}
