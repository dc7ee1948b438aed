package dev.actonce.client;

import dev.actonce.v1.BeginAttemptRequest;
import dev.actonce.v1.BeginAttemptResponse;
import dev.actonce.v1.RunActionsServiceGrpc;
import io.grpc.Context;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.MetadataUtils;
import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.instrumentation.grpc.v1_6.GrpcTelemetry;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * A channel to one actonce sidecar, and the start of every attempt. Thread-safe; close it when done.
 *
 * <p>Every call has a deadline; the channel retries UNAVAILABLE (a draining sidecar, an
 * unreachable store, no connection); every write carries a fresh request_id that a transport
 * retry resends, so a repeat the sidecar already answered gets the first answer back, and a
 * write that landed is found by its derived id. Failures throw {@link ActonceException}, which
 * carries the write's request_id: repeating the write with it after an unknown outcome gets the
 * first answer back.
 *
 * <p>A client connected with an {@link OpenTelemetry} traces every call through OpenTelemetry's
 * gRPC instrumentation: a client span per call, and the W3C trace context sent along, so that
 * the agent's trace goes on in the sidecar.
 */
public final class ActonceClient implements AutoCloseable {
  /**
   * How long a call may take unless told otherwise: above the sidecar's own store deadline (5 s),
   * so that a slow store reaches the caller as the sidecar's own error.
   */
  public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(10);

  // grpc-java reads service config numbers as doubles.
  private static final Map<String, ?> SERVICE_CONFIG =
      Map.of(
          "methodConfig",
          List.of(
              Map.of(
                  "name", List.of(Map.of("service", RunActionsServiceGrpc.SERVICE_NAME)),
                  "retryPolicy",
                      Map.of(
                          "maxAttempts", 4.0,
                          "initialBackoff", "0.1s",
                          "maxBackoff", "1s",
                          "backoffMultiplier", 2.0,
                          "retryableStatusCodes", List.of("UNAVAILABLE")))));

  /**
   * The call metadata that carries an attempt's capability: every call naming an attempt sends it
   * when the attempt has one, which a sidecar started with --agent-capabilities asks for.
   */
  public static final String CAPABILITY_METADATA = "actonce-attempt-capability";

  private static final Metadata.Key<String> CAPABILITY_KEY =
      Metadata.Key.of(CAPABILITY_METADATA, Metadata.ASCII_STRING_MARSHALLER);

  private final ManagedChannel channel;
  private final RunActionsServiceGrpc.RunActionsServiceBlockingStub stub;
  private final Duration timeout;

  private ActonceClient(ManagedChannel channel, Duration timeout) {
    this.channel = channel;
    this.stub = RunActionsServiceGrpc.newBlockingStub(channel);
    this.timeout = timeout;
  }

  /** Where {@link #connect()} finds the sidecar: the deploy manifests set it for the agent. */
  public static final String TARGET_ENV = "ACTONCE_TARGET";

  /**
   * Connects to the sidecar at {@code target} ("127.0.0.1:50051", "unix:///run/actonce.sock") in
   * plaintext: it runs in the agent's pod. Every call carries the API token the environment names
   * ({@link ApiToken#fromEnvironment()}), if any. A null target is ACTONCE_TARGET's.
   *
   * @throws ActonceException (INVALID_ARGUMENT, PERMANENT) for a target written as a URL
   *     ("http://..."), saying to write HOST:PORT, and for no target at all
   */
  public static ActonceClient connect(String target) {
    return connect(target, DEFAULT_TIMEOUT);
  }

  /** Connects to the sidecar at ACTONCE_TARGET, as {@link #connect(String)} does. */
  public static ActonceClient connect() {
    return connect((String) null);
  }

  /** Connects as {@link #connect(String, Duration)} does, every call carrying {@code token}. */
  public static ActonceClient connect(String target, Duration timeout, ApiToken token) {
    return connect(plaintext(target), timeout, token);
  }

  private static ManagedChannelBuilder<?> plaintext(String target) {
    return ManagedChannelBuilder.forTarget(Settings.target(target, System.getenv()))
        .usePlaintext();
  }

  /** Connects through a channel builder of the caller's, every call carrying {@code token}. */
  public static ActonceClient connect(
      ManagedChannelBuilder<?> builder, Duration timeout, ApiToken token) {
    builder.intercept(token.interceptor());
    return build(builder, timeout);
  }

  /** Connects with {@code timeout} as the deadline of every call. */
  public static ActonceClient connect(String target, Duration timeout) {
    return connect(plaintext(target), timeout);
  }

  /**
   * Connects through a channel builder of the caller's (credentials, executors); the client adds
   * its retry policy to it, and the API token the environment names, if any.
   */
  public static ActonceClient connect(ManagedChannelBuilder<?> builder, Duration timeout) {
    ApiToken.fromEnvironment().ifPresent(token -> builder.intercept(token.interceptor()));
    return build(builder, timeout);
  }

  private static ActonceClient build(ManagedChannelBuilder<?> builder, Duration timeout) {
    ManagedChannel channel = builder.defaultServiceConfig(SERVICE_CONFIG).enableRetry().build();
    return new ActonceClient(channel, timeout);
  }

  /**
   * Connects as {@link #connect(String, Duration)} does, tracing every call with {@code
   * openTelemetry} (the agent's own, e.g. {@code GlobalOpenTelemetry.get()} once its SDK is set
   * up): each call is a client span under the current one, and the sidecar's spans go on from it.
   */
  public static ActonceClient connect(String target, Duration timeout, OpenTelemetry openTelemetry) {
    return connect(plaintext(target), timeout, openTelemetry);
  }

  /** Connects through a channel builder of the caller's, tracing every call with {@code openTelemetry}. */
  public static ActonceClient connect(
      ManagedChannelBuilder<?> builder, Duration timeout, OpenTelemetry openTelemetry) {
    builder.intercept(GrpcTelemetry.create(openTelemetry).createClientInterceptor());
    return connect(builder, timeout);
  }

  /** Starts one try of a run from its last checkpoint. */
  public Attempt begin(Run run) {
    return begin(run, "");
  }

  /**
   * A handle on an attempt begun elsewhere: by a harness that holds the API token and hands this
   * process the attempt's id, its run and its capability ({@link Attempt#capability()}). Making it
   * calls nothing; its calls carry the capability, which is all a sidecar started with
   * --agent-capabilities asks of them. Its ids derive under scheme version 1 locally; see {@link
   * #attempt(String, Run, String, int)}.
   */
  public Attempt attempt(String attemptId, Run run, String capability) {
    return attempt(attemptId, run, capability, 1);
  }

  /**
   * A handle on an attempt begun elsewhere, whose ids the sidecar derives under scheme {@code
   * idSchemeVersion} ({@link Attempt#idScheme()}): only deriving ids locally reads it.
   */
  public Attempt attempt(String attemptId, Run run, String capability, int idSchemeVersion) {
    return new Attempt(
        this, attemptId, capability, run, new DerivedIds.IdScheme(idSchemeVersion, run.scope()));
  }

  /** BeginAttempt, carrying a delivery's capability ("" for none). */
  Attempt begin(Run run, String capability) {
    BeginAttemptRequest.Builder request =
        BeginAttemptRequest.newBuilder()
            .setRunId(run.runId())
            .setRule(run.rule())
            .setCheckpoint(run.checkpoint())
            .setScope(run.scope())
            .setDeliveryAttemptId(run.deliveryAttemptId());
    run.leaseDeadline().ifPresent(d -> request.setLeaseDeadline(Attempt.timestamp(d)));
    BeginAttemptResponse response = call(capability, s -> s.beginAttempt(request.build()));
    // A sidecar from before scheme versions answers none: it derives version 1.
    int version = Math.max(response.getIdSchemeVersion(), 1);
    return new Attempt(
        this,
        response.getAttemptId(),
        response.getCapability(),
        run,
        new DerivedIds.IdScheme(version, run.scope()));
  }

  /**
   * A fresh request_id. Each write gets one unless it is given one ({@link WriteOption#requestId}):
   * choose it yourself before the first try to know it whatever happens to the call. An {@link
   * ActonceException} from a write carries it too.
   */
  public static String newRequestId() {
    return UUID.randomUUID().toString();
  }

  /** One unary call with the client's deadline; its failure becomes an ActonceException. */
  <T> T call(Function<RunActionsServiceGrpc.RunActionsServiceBlockingStub, T> method) {
    return call("", method, "");
  }

  /** A call naming an attempt, carrying its capability ("" for none). */
  <T> T call(
      String capability, Function<RunActionsServiceGrpc.RunActionsServiceBlockingStub, T> method) {
    return call(capability, method, "");
  }

  /**
   * A write with the client's deadline, carrying its attempt's capability ("" for none); its
   * failure becomes an ActonceException carrying requestId.
   */
  <T> T call(
      String capability,
      Function<RunActionsServiceGrpc.RunActionsServiceBlockingStub, T> method,
      String requestId) {
    RunActionsServiceGrpc.RunActionsServiceBlockingStub bounded =
        stub.withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS);
    if (!capability.isEmpty()) {
      Metadata headers = new Metadata();
      headers.put(CAPABILITY_KEY, capability);
      bounded = bounded.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(headers));
    }
    try {
      return method.apply(bounded);
    } catch (StatusRuntimeException e) {
      // A blocking call is cancelled by its caller by interrupting the thread or cancelling the
      // gRPC context; a CANCELLED after either is the caller's own doing, any other is not.
      boolean callerCancelled = Thread.currentThread().isInterrupted() || Context.current().isCancelled();
      throw ActonceException.from(e, requestId, callerCancelled);
    }
  }

  /** Closes the channel, giving calls in flight up to five seconds to finish. */
  @Override
  public void close() {
    channel.shutdown();
    try {
      if (!channel.awaitTermination(5, TimeUnit.SECONDS)) {
        channel.shutdownNow();
      }
    } catch (InterruptedException e) {
      channel.shutdownNow();
      Thread.currentThread().interrupt();
    }
  }
}
