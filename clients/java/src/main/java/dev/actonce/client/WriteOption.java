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

  /**
   * Name a create, a thread or a step by a key of the caller's (1 to 255 bytes), unique within the
   * run and checkpoint: its id derives from the key instead of the data, title or arguments, so a
   * redelivery whose data differs (a timestamp, a uuid) finds the same artifact, thread or step.
   * The same key with other data is refused with reason KEY_REUSED ({@link FailureClass#REFUSED}).
   */
  static WriteOption key(String key) {
    return new Key(key);
  }

  /** Offers the write for review. */
  enum Propose implements WriteOption {
    INSTANCE
  }

  /** Names the call's request_id. */
  record RequestId(String id) implements WriteOption {}

  /** Names the write by the caller's key. */
  record Key(String key) implements WriteOption {}
}
