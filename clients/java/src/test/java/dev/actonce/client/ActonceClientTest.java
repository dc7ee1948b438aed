package dev.actonce.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonParser;
import io.grpc.Status;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The client against a real sidecar: writes land once, refusals are typed. */
class ActonceClientTest {
  private static Sidecar sidecar;
  private static ActonceClient client;

  @BeforeAll
  static void start() throws Exception {
    sidecar = Sidecar.start();
    client = ActonceClient.connect(sidecar.target);
  }

  @AfterAll
  static void stop() throws Exception {
    client.close();
    sidecar.close();
  }

  private static Run newRun(String rule) {
    return Run.of("run-" + UUID.randomUUID(), rule, "cp-1");
  }

  /** One run's writes; the retry test makes them again. */
  private static Map<String, Write> writeAll(Attempt attempt) {
    Map<String, Write> out = new LinkedHashMap<>();
    Write thread = attempt.createThread("Incident 7");
    Write ticket = attempt.create("ticket", "{\"title\":\"Disk full\",\"severity\":2}");
    out.put("thread", thread);
    out.put("ticket", ticket);
    out.put("edit", attempt.edit(ticket.id(), "/status", "\"open\""));
    out.put("notice", attempt.notice(thread.id(), "Filed " + ticket.id()));
    out.put("send", attempt.send(thread.id(), "Please look at " + ticket.id()));
    return out;
  }

  @Test
  void writesApply() {
    Run run = newRun(Sidecar.SEND_RULE);
    Attempt attempt = client.begin(run);
    Map<String, Write> written = writeAll(attempt);
    written.forEach((name, w) -> assertEquals(Outcome.APPLIED, w.outcome(), name));

    // The sidecar's id is the one the scheme derives.
    List<String> identity = DerivedIds.createIdentity("ticket", "{\"severity\":2,\"title\":\"Disk full\"}");
    assertEquals(
        DerivedIds.deriveId(DerivedIds.WriteType.CREATE, run.runId(), "cp-1", identity, 0),
        written.get("ticket").id());

    Artifact artifact = attempt.readArtifact(written.get("ticket").id());
    assertEquals(
        JsonParser.parseString("{\"title\":\"Disk full\",\"severity\":2,\"status\":\"open\"}"),
        JsonParser.parseString(artifact.dataJson()));
    assertEquals(written.get("edit").version(), artifact.version());
    List<Message> messages = attempt.readThread(written.get("thread").id());
    assertEquals(
        List.of(
            List.of("notice", written.get("notice").id()),
            List.of("message", written.get("send").id())),
        messages.stream().map(m -> List.of(m.kind(), m.id())).toList());

    Step step = attempt.beginStep("send_email", Effect.IDEMPOTENT_WRITE, "{\"to\":\"ops@example.com\"}");
    assertFalse(step.done());
    assertEquals(Outcome.APPLIED, attempt.endStep(step.id(), "{\"sent\":true}"));
    Instant lease = Instant.now().plus(Duration.ofHours(1)).truncatedTo(ChronoUnit.SECONDS);
    assertEquals(lease, attempt.extendLease(lease));
    // Five writes, and the step: its end is not another write.
    assertEquals(new Counts(6, 0, 0, 0), attempt.end());
  }

  @Test
  void retriedAttemptGetsTheSameIdsAlreadyApplied() {
    Run run = newRun(Sidecar.SEND_RULE);
    Map<String, Write> first = writeAll(client.begin(run));
    // The first attempt dies without ending; the run is retried from its checkpoint.
    Attempt retry = client.begin(run);
    Map<String, Write> again = writeAll(retry);
    again.forEach(
        (name, w) -> {
          assertEquals(first.get(name).id(), w.id(), name);
          Outcome expected = name.equals("edit") ? Outcome.SKIPPED : Outcome.ALREADY_APPLIED;
          assertEquals(expected, w.outcome(), name);
        });
    assertEquals(2, retry.readThread(first.get("thread").id()).size());
    assertEquals(new Counts(0, 4, 1, 0), retry.end());
  }

  @Test
  void scopedAttemptsKeepTheirOwnIdsAndDoNotFenceEachOther() {
    Run run = newRun("scopes");
    Write thread = client.begin(run).createThread("Tool calls");
    List<Attempt> calls =
        List.of(client.begin(run.withScope("call_1")), client.begin(run.withScope("call_2")));
    List<String> ids = new java.util.ArrayList<>();
    for (Attempt attempt : calls) {
      assertEquals(
          new DerivedIds.IdScheme(DerivedIds.SCHEME_VERSION, attempt.run().scope()),
          attempt.idScheme());
      Write posted = attempt.notice(thread.id(), "Charged.");
      assertEquals(Outcome.APPLIED, posted.outcome());
      String expected =
          DerivedIds.deriveId(
              attempt.idScheme(),
              DerivedIds.WriteType.NOTICE,
              run.runId(),
              run.checkpoint(),
              DerivedIds.postIdentity(thread.id(), "Charged."),
              0);
      assertEquals(expected, posted.id());
      ids.add(posted.id());
    }
    assertNotEquals(ids.get(0), ids.get(1));
    // A new attempt of call_1 fences the older one only.
    Attempt newer = client.begin(run.withScope("call_1"));
    ActonceException fenced =
        assertThrows(ActonceException.class, () -> calls.get(0).notice(thread.id(), "late"));
    assertEquals("ATTEMPT_FENCED", fenced.reason());
    assertEquals(Outcome.APPLIED, calls.get(1).notice(thread.id(), "still on").outcome());
    assertEquals(ids.get(0), newer.notice(thread.id(), "Charged.").id());
  }

  @Test
  void aNewerDeliveryFencesTheToolCallsOfAnOlderOne() {
    Run run = Run.of("run-" + UUID.randomUUID(), "deliveries", "");
    Attempt older = client.begin(run);
    Write thread = older.createThread("Deliveries");
    Attempt toolCall = client.begin(run.withScope("call_1").withDeliveryAttemptId(older.id()));
    assertEquals(Outcome.APPLIED, toolCall.notice(thread.id(), "before the redelivery").outcome());
    client.begin(run); // the queue delivers the job again
    // The older delivery's tool call is another scope than the newer delivery's, yet fenced.
    ActonceException fenced =
        assertThrows(ActonceException.class, () -> toolCall.notice(thread.id(), "late"));
    assertEquals("ATTEMPT_FENCED", fenced.reason());
    ActonceException unscoped =
        assertThrows(
            ActonceException.class, () -> client.begin(run.withDeliveryAttemptId(older.id())));
    assertEquals("INVALID_ARGUMENT", unscoped.reason());
  }

  @Test
  void anAbortedStepRunsInALaterAttempt() {
    Run run = newRun("steps");
    Attempt first = client.begin(run);
    Step step = first.beginStep("charge_card", Effect.NON_IDEMPOTENT_WRITE, "{\"amount\":10}");
    assertEquals(Outcome.APPLIED, first.abortStep(step.id(), "connection refused"));
    ActonceException aborted =
        assertThrows(ActonceException.class, () -> first.endStep(step.id(), "{}"));
    assertEquals("STEP_ABORTED", aborted.reason());
    Attempt retry = client.begin(run);
    Step again = retry.beginStep("charge_card", Effect.NON_IDEMPOTENT_WRITE, "{\"amount\":10}");
    assertEquals(step.id(), again.id());
    assertFalse(again.done());
    retry.endStep(again.id(), "{\"charged\":true}");
    ActonceException ended =
        assertThrows(ActonceException.class, () -> retry.abortStep(again.id(), "too late"));
    assertEquals("STEP_ENDED", ended.reason());
  }

  @Test
  void invalidJsonIsRefused() {
    Attempt attempt = client.begin(newRun("refusals"));
    ActonceException e = assertThrows(ActonceException.class, () -> attempt.create("ticket", "{"));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.code());
    assertEquals("INVALID_ARGUMENT", e.reason());
    assertEquals(FailureClass.REFUSED, e.failureClass());
    assertEquals(
        List.of(true, false, false, false),
        List.of(e.isRefused(), e.isRetryable(), e.isPermanent(), e.isUnknown()));
    assertEquals("data_json", e.violations().get(0).field());
  }

  @Test
  void sendOffTheAllowlistIsPermanent() {
    Attempt attempt = client.begin(newRun("not-a-sender"));
    Write thread = attempt.createThread("Refusals");
    ActonceException e = assertThrows(ActonceException.class, () -> attempt.send(thread.id(), "may I?"));
    assertEquals("FORBIDDEN", e.reason());
    assertTrue(e.isPermanent());
    assertEquals(Status.Code.PERMISSION_DENIED, e.code());
  }

  @Test
  void anEndedAttemptIsUnknownAndRetryable() {
    Attempt attempt = client.begin(newRun("refusals"));
    attempt.end();
    ActonceException e = assertThrows(ActonceException.class, () -> attempt.create("ticket", "{}"));
    assertEquals("UNKNOWN_ATTEMPT", e.reason());
    assertTrue(e.isRetryable());
  }

  @Test
  void requestIdReplay() {
    Attempt attempt = client.begin(newRun("replay"));
    String data = "{\"title\":\"once\"}";
    Write first = attempt.create("ticket", data, WriteOption.requestId("req-1"));
    assertEquals(first, attempt.create("ticket", data, WriteOption.requestId("req-1")));
    // Without the same request_id the same data is a second, distinct write.
    Write second = attempt.create("ticket", data);
    assertNotEquals(first.id(), second.id());
    assertEquals(Outcome.APPLIED, second.outcome());
    ActonceException misuse =
        assertThrows(
            ActonceException.class,
            () -> attempt.create("ticket", "{\"title\":\"other\"}", WriteOption.requestId("req-1")));
    assertEquals("request_id", misuse.violations().get(0).field());
    assertEquals(2, attempt.end().applied()); // a replay is not a write
  }

  @Test
  void aRequestIdsLimitIs512BytesInAnyText() {
    Attempt attempt = client.begin(newRun("limits"));
    String atTheLimit = "é".repeat(256); // 512 bytes of UTF-8, 256 characters
    assertEquals(
        Outcome.APPLIED, attempt.create("ticket", "{}", WriteOption.requestId(atTheLimit)).outcome());
    ActonceException over =
        assertThrows(
            ActonceException.class,
            () -> attempt.create("ticket", "{}", WriteOption.requestId(atTheLimit + "a")));
    assertEquals("INVALID_ARGUMENT", over.reason());
    assertEquals("request_id", over.violations().get(0).field());
  }

  @Test
  void everyCallHasADeadline() throws Exception {
    try (ActonceClient hurried = ActonceClient.connect(sidecar.target, Duration.ofNanos(1))) {
      ActonceException e =
          assertThrows(ActonceException.class, () -> hurried.begin(newRun("deadline")));
      assertEquals(Status.Code.DEADLINE_EXCEEDED, e.code());
      assertTrue(e.isRetryable());
    }
  }
}
