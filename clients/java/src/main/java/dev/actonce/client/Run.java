package dev.actonce.client;

import java.time.Instant;
import java.util.Objects;
import java.util.Optional;

/**
 * The run an attempt belongs to.
 *
 * @param runId the run's id, the same for every attempt of the run
 * @param rule the automation the run belongs to; the sidecar's send allowlist names rules
 * @param checkpoint the run's last checkpoint, "" at the run's start
 * @param leaseDeadline when the queue's lease on the run ends; writes it would not outlast are
 *     refused
 * @param scope the attempt's part of the run, stable across its retries (a tool call's id, say);
 *     "" for an unscoped attempt. Fencing and derived ids are per (run, scope): sibling scopes
 *     never fence each other, and the same write in two scopes is two writes.
 * @param deliveryAttemptId the delivery a scoped attempt belongs to: the id of the unscoped
 *     attempt of the queue's delivery of the job whose tool call it is. A newer delivery of the
 *     run then fences this attempt too. "" for none. Not an input of any derived id.
 */
public record Run(
    String runId,
    String rule,
    String checkpoint,
    Optional<Instant> leaseDeadline,
    String scope,
    String deliveryAttemptId) {
  public Run {
    Objects.requireNonNull(runId, "runId");
    Objects.requireNonNull(rule, "rule");
    Objects.requireNonNull(checkpoint, "checkpoint");
    Objects.requireNonNull(leaseDeadline, "leaseDeadline");
    Objects.requireNonNull(scope, "scope");
    Objects.requireNonNull(deliveryAttemptId, "deliveryAttemptId");
  }

  /** A run's attempt of one scope, of no delivery. */
  public Run(
      String runId, String rule, String checkpoint, Optional<Instant> leaseDeadline, String scope) {
    this(runId, rule, checkpoint, leaseDeadline, scope, "");
  }

  /** An unscoped run. */
  public Run(String runId, String rule, String checkpoint, Optional<Instant> leaseDeadline) {
    this(runId, rule, checkpoint, leaseDeadline, "", "");
  }

  /** A run with no lease deadline. */
  public static Run of(String runId, String rule, String checkpoint) {
    return new Run(runId, rule, checkpoint, Optional.empty());
  }

  /** This run with a lease deadline. */
  public Run withLeaseDeadline(Instant deadline) {
    return new Run(runId, rule, checkpoint, Optional.of(deadline), scope, deliveryAttemptId);
  }

  /** This run's attempt of one scope. */
  public Run withScope(String scope) {
    return new Run(runId, rule, checkpoint, leaseDeadline, scope, deliveryAttemptId);
  }

  /** This run's attempt as a tool call of the delivery {@code deliveryAttemptId} names. */
  public Run withDeliveryAttemptId(String deliveryAttemptId) {
    return new Run(runId, rule, checkpoint, leaseDeadline, scope, deliveryAttemptId);
  }
}
