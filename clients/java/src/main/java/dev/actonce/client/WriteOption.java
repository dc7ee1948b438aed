package dev.actonce.client;

/** Options of one write. */
public sealed interface WriteOption {
  /** Offer a create or an edit for review instead of applying it. */
  static WriteOption propose() {
    return Propose.INSTANCE;
  }

  /**
   * Send the write with this request_id instead of a fresh one. Repeating a call with its first
   * try's id ({@link ActonceException#requestId}), in the same attempt, after an error that left
   * its outcome unknown (a deadline, a dropped connection) gets the first answer back.
   */
  static WriteOption requestId(String id) {
    return new RequestId(id);
  }

  /** Offers the write for review. */
  enum Propose implements WriteOption {
    INSTANCE
  }

  /** Names the call's request_id. */
  record RequestId(String id) implements WriteOption {}
}
