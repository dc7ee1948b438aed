package dev.actonce.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Every error the sidecar answers with: the gRPC status code, and the reason and failure class
 * from its {@code google.rpc.ErrorInfo} (domain "actonce"), with field violations for bad input.
 */
public final class ActonceException extends RuntimeException {
  public static final String DOMAIN = "actonce";

  /** One bad field of a request. */
  public record FieldViolation(String field, String description) {}

  private final Status.Code code;
  private final String reason;
  private final FailureClass failureClass;
  private final Map<String, String> metadata;
  private final List<FieldViolation> violations;

  ActonceException(
      String message,
      Status.Code code,
      String reason,
      FailureClass failureClass,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause) {
    super(reason + " (" + failureClass + "): " + message, cause);
    this.code = code;
    this.reason = reason;
    this.failureClass = failureClass;
    this.metadata = Map.copyOf(metadata);
    this.violations = List.copyOf(violations);
  }

  /**
   * The ActonceException for a failed call. A status with no ErrorInfo came from the transport:
   * UNAVAILABLE (after the channel's own retries) and DEADLINE_EXCEEDED are retryable, since
   * derived ids make a retried run safe; anything else is unknown.
   */
  static ActonceException from(StatusRuntimeException e) {
    Status.Code code = e.getStatus().getCode();
    String reason = code.name();
    FailureClass failureClass =
        code == Status.Code.UNAVAILABLE || code == Status.Code.DEADLINE_EXCEEDED
            ? FailureClass.RETRYABLE
            : FailureClass.UNKNOWN;
    Map<String, String> metadata = Map.of();
    List<FieldViolation> violations = new ArrayList<>();
    com.google.rpc.Status status = StatusProto.fromThrowable(e);
    for (Any detail : status == null ? List.<Any>of() : status.getDetailsList()) {
      try {
        if (detail.is(ErrorInfo.class)) {
          ErrorInfo info = detail.unpack(ErrorInfo.class);
          if (!info.getDomain().equals(DOMAIN)) {
            continue;
          }
          reason = info.getReason();
          metadata = info.getMetadataMap();
          failureClass = failureClass(metadata.getOrDefault("failure_class", ""));
        } else if (detail.is(BadRequest.class)) {
          for (BadRequest.FieldViolation v : detail.unpack(BadRequest.class).getFieldViolationsList()) {
            violations.add(new FieldViolation(v.getField(), v.getDescription()));
          }
        }
      } catch (InvalidProtocolBufferException malformed) {
        // A detail that does not decode adds nothing; the status code still speaks.
      }
    }
    String message = e.getStatus().getDescription() == null ? "" : e.getStatus().getDescription();
    return new ActonceException(message, code, reason, failureClass, metadata, violations, e);
  }

  private static FailureClass failureClass(String name) {
    try {
      return FailureClass.valueOf(name);
    } catch (IllegalArgumentException unknown) {
      return FailureClass.UNKNOWN;
    }
  }

  /** The gRPC status code. */
  public Status.Code code() {
    return code;
  }

  /** The ErrorInfo reason, e.g. INVALID_ARGUMENT or FORBIDDEN; the code's name without one. */
  public String reason() {
    return reason;
  }

  public FailureClass failureClass() {
    return failureClass;
  }

  /** The ErrorInfo metadata, failure_class included. */
  public Map<String, String> metadata() {
    return metadata;
  }

  public List<FieldViolation> violations() {
    return violations;
  }

  /** Hand it to the model: it can correct the call. */
  public boolean isRefused() {
    return failureClass == FailureClass.REFUSED;
  }

  /** Fail the attempt; the queue retries the run. */
  public boolean isRetryable() {
    return failureClass == FailureClass.RETRYABLE;
  }

  /** The run fails, with no retry. */
  public boolean isPermanent() {
    return failureClass == FailureClass.PERMANENT;
  }

  /** The outcome is not known: never retry automatically. */
  public boolean isUnknown() {
    return failureClass == FailureClass.UNKNOWN;
  }
}
