package dev.actonce.client;

/**
 * The sidecar's answer to {@link Attempt#beginStep}.
 *
 * @param resultJson the recorded result when an earlier attempt ended the step, else ""
 */
public record Step(String id, Outcome outcome, String resultJson) {
  /** An earlier attempt made and ended this call: use {@link #resultJson}, do not call again. */
  public boolean done() {
    return outcome == Outcome.ALREADY_APPLIED;
  }
}
