package dev.actonce.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Every error the sidecar answers with: the gRPC status code, and the reason and failure class
 * from its {@code google.rpc.ErrorInfo} (domain "actonce"), with field violations for bad input
 * and, for a write, the request_id it was sent with.
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
  private final String requestId;

  ActonceException(
      String message,
      Status.Code code,
      String reason,
      FailureClass failureClass,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      Throwable cause) {
    this(message, code, reason, failureClass, metadata, violations, "", cause);
  }

  ActonceException(
      String message,
      Status.Code code,
      String reason,
      FailureClass failureClass,
      Map<String, String> metadata,
      List<FieldViolation> violations,
      String requestId,
      Throwable cause) {
    super(reason + " (" + failureClass + "): " + message, cause);
    this.code = code;
    this.reason = reason;
    this.failureClass = failureClass;
    this.metadata = Map.copyOf(metadata);
    this.violations = List.copyOf(violations);
    this.requestId = requestId;
  }

  private static final Metadata.Key<byte[]> DETAILS =
      Metadata.Key.of("grpc-status-details-bin", Metadata.BINARY_BYTE_MARSHALLER);

  private static final class Malformed extends Exception {
    Malformed() {
      super(null, null, false, false);
    }
  }

  /**
   * The ActonceException for a failed call; it never throws, whatever the status holds. One table
   * decides, the same in every client (docs/status-cases.md):
   *
   * <ol>
   *   <li>details (the raw grpc-status-details-bin trailer) that do not decode, whose code is not
   *       the call's, or whose ErrorInfo or BadRequest does not decode: a malformed status; the
   *       code's name is the reason, the class UNKNOWN;
   *   <li>an ErrorInfo of domain "actonce": its reason, and its failure_class when it is exactly
   *       one of the four classes, else UNKNOWN;
   *   <li>no such ErrorInfo, a status from the transport: the code's name is the reason;
   *       UNAVAILABLE (after the channel's own retries), DEADLINE_EXCEEDED and a CANCELLED the
   *       caller did not cause are RETRYABLE, anything else UNKNOWN.
   * </ol>
   *
   * <p>A CANCELLED the caller did not cause ({@code callerCancelled}: it interrupted the thread or
   * cancelled the gRPC context) is safe to retry: a sidecar never acts on a call it did not
   * dispatch (a draining one answers SHUTTING_DOWN), and a write that may have landed stays bound
   * to its request_id, so repeating it with that request_id gets the first answer, and a retried
   * run finds it by its derived id.
   */
  static ActonceException from(
      StatusRuntimeException e, String requestId, boolean callerCancelled) {
    Status.Code code = e.getStatus().getCode();
    String message = e.getStatus().getDescription() == null ? "" : e.getStatus().getDescription();
    List<FieldViolation> violations = new ArrayList<>();
    ErrorInfo info;
    try {
      info = decode(code, e.getTrailers(), violations);
    } catch (Malformed | RuntimeException malformed) {
      return new ActonceException(
          message, code, code.name(), FailureClass.UNKNOWN, Map.of(), List.of(), requestId, e);
    }
    if (info != null) {
      FailureClass failureClass = failureClass(info.getMetadataMap().getOrDefault("failure_class", ""));
      return new ActonceException(
          message, code, info.getReason(), failureClass, info.getMetadataMap(), violations, requestId, e);
    }
    boolean retryable =
        code == Status.Code.UNAVAILABLE
            || code == Status.Code.DEADLINE_EXCEEDED
            || (code == Status.Code.CANCELLED && !callerCancelled);
    return new ActonceException(
        message,
        code,
        code.name(),
        retryable ? FailureClass.RETRYABLE : FailureClass.UNKNOWN,
        Map.of(),
        violations,
        requestId,
        e);
  }

  static ActonceException from(StatusRuntimeException e) {
    return from(e, "", false);
  }

  /** The sidecar's ErrorInfo in a status's details, or null; adds its field violations. */
  private static ErrorInfo decode(Status.Code code, Metadata trailers, List<FieldViolation> violations)
      throws Malformed {
    if (trailers == null || !trailers.containsKey(DETAILS)) {
      return null;
    }
    List<byte[]> raw = new ArrayList<>();
    trailers.getAll(DETAILS).forEach(raw::add);
    if (raw.size() != 1) {
      throw new Malformed();
    }
    com.google.rpc.Status status;
    try {
      status = com.google.rpc.Status.parseFrom(raw.get(0));
    } catch (InvalidProtocolBufferException e) {
      throw new Malformed();
    }
    if (status.getCode() != code.value()) {
      throw new Malformed();
    }
    ErrorInfo info = null;
    for (Any detail : status.getDetailsList()) {
      try {
        if (detail.is(ErrorInfo.class)) {
          ErrorInfo found = detail.unpack(ErrorInfo.class);
          if (found.getDomain().equals(DOMAIN) && info == null) {
            info = found;
          }
        } else if (detail.is(BadRequest.class)) {
          for (BadRequest.FieldViolation v : detail.unpack(BadRequest.class).getFieldViolationsList()) {
            violations.add(new FieldViolation(v.getField(), v.getDescription()));
          }
        }
      } catch (InvalidProtocolBufferException e) {
        throw new Malformed();
      }
    }
    return info;
  }

  private static FailureClass failureClass(String name) {
    for (FailureClass known : FailureClass.values()) {
      if (known.name().equals(name)) {
        return known;
      }
    }
    return FailureClass.UNKNOWN;
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

  /**
   * The request_id the write was sent with ("" for a call that is not a write). Repeating the
   * write with it ({@link WriteOption#requestId}), in the same attempt, gets the first answer back.
   */
  public String requestId() {
    return requestId;
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
