package dev.actonce.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.actonce.v1.RunActionsServiceGrpc;
import io.grpc.CallOptions;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.ClientCalls;
import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiFunction;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The API token against a real sidecar started with --api-token-file: every RPC refuses a call
 * without it and takes one with it; the client finds the token given or in its environment, and
 * follows a file that changes.
 */
class ApiTokenTest {
  private static final String TOKEN = "java-t0ken-3e9b";
  private static Path tokenFile;
  private static Sidecar sidecar;

  @BeforeAll
  static void start() throws Exception {
    tokenFile = Files.createTempDirectory("actonce-java-token-").resolve("api.token");
    writeToken(tokenFile, TOKEN);
    sidecar = Sidecar.start("--api-token-file", tokenFile.toString());
  }

  @AfterAll
  static void stop() throws Exception {
    sidecar.close();
  }

  /** Swaps a new token file in whole, as the kubelet updates a Secret. */
  private static void writeToken(Path path, String token) throws Exception {
    Path fresh = path.resolveSibling(path.getFileName() + ".new");
    Files.writeString(fresh, token + "\n");
    Files.move(fresh, path, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }

  private static Run newRun() {
    return Run.of("run-" + UUID.randomUUID(), Sidecar.SEND_RULE, "cp");
  }

  private static ActonceClient connect(ApiToken token) {
    return ActonceClient.connect(sidecar.target, ActonceClient.DEFAULT_TIMEOUT, token);
  }

  /** An attempt with what each call needs, and one call of every RPC through the client. */
  private static Map<String, BiFunction<ActonceClient, Attempt, Object>> everyRpc(
      Attempt attempt) {
    Write ticket = attempt.create("ticket", "{\"n\":1}");
    Write thread = attempt.createThread("incident");
    Step step = attempt.beginStep("charge", Effect.NON_IDEMPOTENT_WRITE, "{\"amount\":1}");
    Step unused = attempt.beginStep("page", Effect.NON_IDEMPOTENT_WRITE, "{\"who\":\"ops\"}");
    Instant lease = Instant.now().plus(Duration.ofHours(1)).truncatedTo(ChronoUnit.SECONDS);
    Map<String, BiFunction<ActonceClient, Attempt, Object>> calls = new LinkedHashMap<>();
    calls.put("BeginAttempt", (c, a) -> c.begin(newRun()));
    calls.put("Create", (c, a) -> a.create("ticket", "{\"n\":2}"));
    calls.put("Edit", (c, a) -> a.edit(ticket.id(), "/status", "\"open\""));
    calls.put("Notice", (c, a) -> a.notice(thread.id(), "filed"));
    calls.put("CreateThread", (c, a) -> a.createThread("another"));
    calls.put("Send", (c, a) -> a.send(thread.id(), "please look"));
    calls.put("Read", (c, a) -> a.readArtifact(ticket.id()));
    calls.put("BeginStep", (c, a) -> a.beginStep("refund", Effect.IDEMPOTENT_WRITE, "{}"));
    calls.put("EndStep", (c, a) -> a.endStep(step.id(), "{\"charged\":true}"));
    calls.put("AbortStep", (c, a) -> a.abortStep(unused.id(), "never called"));
    calls.put("ExtendLease", (c, a) -> a.extendLease(lease));
    calls.put("EndAttempt", (c, a) -> a.end());
    return calls;
  }

  private static void assertUnauthenticated(ActonceException e, String what) {
    assertEquals(
        List.of(Status.Code.UNAUTHENTICATED, "UNAUTHENTICATED", FailureClass.PERMANENT),
        List.of(e.code(), e.reason(), e.failureClass()),
        what);
  }

  /** Each method of the service descriptor, called raw with an empty request and no token. */
  @Test
  void everyMethodOfTheServiceRefusesACallWithoutTheToken() throws Exception {
    ManagedChannel channel = ManagedChannelBuilder.forTarget(sidecar.target).usePlaintext().build();
    try {
      for (MethodDescriptor<?, ?> method :
          RunActionsServiceGrpc.getServiceDescriptor().getMethods()) {
        StatusRuntimeException e =
            assertThrows(StatusRuntimeException.class, () -> callEmpty(channel, method));
        assertEquals(
            Status.Code.UNAUTHENTICATED, e.getStatus().getCode(), method.getFullMethodName());
        com.google.rpc.ErrorInfo info =
            StatusProto.fromThrowable(e).getDetails(0).unpack(com.google.rpc.ErrorInfo.class);
        assertEquals(
            List.of("UNAUTHENTICATED", "actonce", "PERMANENT"),
            List.of(info.getReason(), info.getDomain(), info.getMetadataOrThrow("failure_class")));
      }
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  private static <Q, R> R callEmpty(ManagedChannel channel, MethodDescriptor<Q, R> method) {
    InputStream empty = new ByteArrayInputStream(new byte[0]);
    Q request = method.getRequestMarshaller().parse(empty);
    return ClientCalls.blockingUnaryCall(
        channel, method, CallOptions.DEFAULT.withDeadlineAfter(5, TimeUnit.SECONDS), request);
  }

  @Test
  void everyRpcRefusesACallWithoutTheTokenAndTakesItWithIt() {
    Set<String> rpcs =
        RunActionsServiceGrpc.getServiceDescriptor().getMethods().stream()
            .map(MethodDescriptor::getBareMethodName)
            .collect(Collectors.toCollection(TreeSet::new));
    try (ActonceClient client = connect(ApiToken.fromFile(tokenFile))) {
      Attempt attempt = client.begin(newRun());
      Map<String, BiFunction<ActonceClient, Attempt, Object>> calls = everyRpc(attempt);
      assertEquals(rpcs, new TreeSet<>(calls.keySet()), "a new RPC needs its call here");
      for (ApiToken wrong : List.of(ApiToken.of("not-the-token"), ApiToken.of(TOKEN + "x"))) {
        try (ActonceClient other = connect(wrong)) {
          Attempt theirs = new Attempt(other, attempt.id(), attempt.run(), attempt.idScheme());
          calls.forEach(
              (rpc, call) ->
                  assertUnauthenticated(
                      assertThrows(ActonceException.class, () -> call.apply(other, theirs)), rpc));
        }
      }
      ManagedChannelBuilder<?> plain = ManagedChannelBuilder.forTarget(sidecar.target);
      try (ActonceClient bare =
          ActonceClient.connect(plain.usePlaintext(), ActonceClient.DEFAULT_TIMEOUT)) {
        Attempt theirs = new Attempt(bare, attempt.id(), attempt.run(), attempt.idScheme());
        calls.forEach(
            (rpc, call) ->
                assertUnauthenticated(
                    assertThrows(ActonceException.class, () -> call.apply(bare, theirs)), rpc));
      }
      // Nothing of those landed: with the token each call is the first of its kind.
      Map<String, Object> results = new LinkedHashMap<>();
      calls.forEach((rpc, call) -> results.put(rpc, call.apply(client, attempt)));
      assertEquals(Outcome.APPLIED, ((Write) results.get("Create")).outcome());
      assertEquals(Outcome.APPLIED, results.get("EndStep"));
      // 4 made first, then 6 writes and steps: an end or an abort is not a write.
      assertEquals(10, ((Counts) results.get("EndAttempt")).applied());
    }
  }

  @Test
  void theTokenComesFromTheEnvironmentTheFileFirst() {
    String file = tokenFile.toString();
    for (Map<String, String> env :
        List.of(
            Map.of(ApiToken.FILE_ENV, file),
            Map.of(ApiToken.ENV, TOKEN),
            Map.of(ApiToken.FILE_ENV, file, ApiToken.ENV, "wrong"))) {
      try (ActonceClient client = connect(ApiToken.fromEnvironment(env).orElseThrow())) {
        assertNotNull(client.begin(newRun()).id(), env.toString());
      }
    }
    assertFalse(ApiToken.fromEnvironment(Map.of()).isPresent());
  }

  @Test
  void aTokenFileIsFollowedAsItChangesAndOneWithoutATokenIsRefused(@TempDir Path dir)
      throws Exception {
    AtomicLong now = new AtomicLong();
    Path path = dir.resolve("token");
    writeToken(path, "first");
    ApiToken token = ApiToken.fromFile(path, now::get);
    writeToken(path, "second");
    assertEquals("first", token.value()); // read at most once a second
    now.addAndGet(ApiToken.REREAD.toNanos());
    assertEquals("second", token.value());
    Files.delete(path);
    now.addAndGet(ApiToken.REREAD.toNanos());
    assertEquals("second", token.value()); // caught mid-update: the last token stays
    assertFalse(token.toString().contains("second"));
    Path empty = dir.resolve("empty");
    Files.writeString(empty, "\n");
    assertTrue(
        assertThrows(ActonceException.class, () -> ApiToken.fromFile(empty))
            .getMessage()
            .contains("is empty"));
    assertTrue(
        assertThrows(ActonceException.class, () -> ApiToken.fromFile(dir.resolve("missing")))
            .getMessage()
            .contains("ApiToken.fromFile: the API token file"));
  }
}
