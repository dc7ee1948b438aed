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
 */
public record Run(String runId, String rule, String checkpoint, Optional<Instant> leaseDeadline) {
  public Run {
    Objects.requireNonNull(runId, "runId");
    Objects.requireNonNull(rule, "rule");
    Objects.requireNonNull(checkpoint, "checkpoint");
    Objects.requireNonNull(leaseDeadline, "leaseDeadline");
  }

  /** A run with no lease deadline. */
  public static Run of(String runId, String rule, String checkpoint) {
    return new Run(runId, rule, checkpoint, Optional.empty());
  }

  /** This run with a lease deadline. */
  public Run withLeaseDeadline(Instant deadline) {
    return new Run(runId, rule, checkpoint, Optional.of(deadline));
  }
}
