package dev.actonce.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonParser;
import io.grpc.Status;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A key the caller chooses, against a real sidecar: a create, a thread or a step named by a key is
 * one write whatever else its data holds. A redelivery finds it, whatever time its data holds;
 * within one attempt, the same key with other data is refused KEY_REUSED, naming the id the key
 * holds.
 */
class KeyTest {
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

  private static Run newRun() {
    return Run.of("run-" + UUID.randomUUID(), "keys", "cp-1");
  }

  private static String order(int number, String seenAt) {
    return "{\"number\":" + number + ",\"seen_at\":\"" + seenAt + "\"}";
  }

  @Test
  void aKeyedCreateLandsOnceAcrossRedeliveriesWhoseDataHoldsTheirTime() {
    Run run = newRun();
    Attempt first = client.begin(run);
    assertEquals(3, first.idScheme().version(), "a new run derives under scheme 3, which takes keys");
    String made = order(1234, "2026-12-06T05:40:00Z");
    Write created = first.create("order", made, WriteOption.key("order-1234"));
    String derived =
        DerivedIds.deriveKeyedId(
            first.idScheme(),
            DerivedIds.WriteType.CREATE,
            run.runId(),
            run.checkpoint(),
            DerivedIds.keyedCreateIdentity("order", "order-1234"));
    assertEquals(new Write(derived, Outcome.APPLIED, 1), created);
    Write same = first.create("order", made, WriteOption.key("order-1234"));
    assertEquals(List.of(Outcome.ALREADY_APPLIED, created.id()), List.of(same.outcome(), same.id()));
    // In one attempt, the same key with other data names two writes by one key.
    String other = order(5678, "2026-12-06T05:40:00Z");
    ActonceException reused =
        assertThrows(
            ActonceException.class,
            () -> first.create("order", other, WriteOption.key("order-1234")));
    assertEquals(
        List.of(Status.Code.ALREADY_EXISTS, "KEY_REUSED", FailureClass.REFUSED),
        List.of(reused.code(), reused.reason(), reused.failureClass()));
    assertTrue(reused.isRefused());
    assertEquals(created.id(), reused.metadata().get("id"), "KEY_REUSED names the id the key holds");

    // The queue delivers the job again: a new attempt of the run from the same checkpoint, whose
    // data holds a later time.
    Attempt redelivery = client.begin(run);
    String later = order(1234, "2026-12-06T05:41:00Z");
    Write found = redelivery.create("order", later, WriteOption.key("order-1234"));
    assertEquals(List.of(Outcome.ALREADY_APPLIED, created.id()), List.of(found.outcome(), found.id()));
    Artifact stored = redelivery.readArtifact(created.id());
    assertEquals(JsonParser.parseString(made), JsonParser.parseString(stored.dataJson()));
    assertEquals(1, stored.version());
    Counts counts = redelivery.end();
    assertEquals(List.of(0L, 1L), List.of(counts.applied(), counts.alreadyApplied()));
  }

  @Test
  void keyedThreadsAndStepsAreOneWriteEach() {
    Run run = newRun();
    Attempt first = client.begin(run);
    Write thread = first.createThread("Order 1234 at 05:40", WriteOption.key("order-1234"));
    ActonceException retitled =
        assertThrows(
            ActonceException.class,
            () -> first.createThread("Order 5678", WriteOption.key("order-1234")));
    assertEquals("KEY_REUSED", retitled.reason());
    String args = "{\"to\":\"ops@example.com\",\"at\":\"05:40\"}";
    Step step =
        first.beginStep(
            "send_email", Effect.NON_IDEMPOTENT_WRITE, args, WriteOption.key("order-1234/mail"));
    first.endStep(step.id(), "{\"sent\":true}");
    ActonceException reargued =
        assertThrows(
            ActonceException.class,
            () ->
                first.beginStep(
                    "send_email",
                    Effect.NON_IDEMPOTENT_WRITE,
                    "{\"to\":\"cfo@example.com\"}",
                    WriteOption.key("order-1234/mail")));
    assertEquals(
        List.of("KEY_REUSED", FailureClass.REFUSED),
        List.of(reargued.reason(), reargued.failureClass()));

    Attempt redelivery = client.begin(run);
    Write foundThread =
        redelivery.createThread("Order 1234 at 05:41", WriteOption.key("order-1234"));
    assertEquals(new Write(thread.id(), Outcome.ALREADY_APPLIED, 0), foundThread);
    String later = "{\"to\":\"ops@example.com\",\"at\":\"05:41\"}";
    Step foundStep =
        redelivery.beginStep(
            "send_email", Effect.NON_IDEMPOTENT_WRITE, later, WriteOption.key("order-1234/mail"));
    assertEquals(
        List.of(true, step.id(), "{\"sent\":true}"),
        List.of(foundStep.done(), foundStep.id(), foundStep.resultJson()));
  }

  @Test
  void aKeyIsRefusedWhereAWriteTakesNoneOrOver255Bytes() {
    Attempt attempt = client.begin(newRun());
    assertThrows(
        IllegalArgumentException.class,
        () -> attempt.notice("thr_x", "hello", WriteOption.key("k")));
    ActonceException tooLong =
        assertThrows(
            ActonceException.class,
            () -> attempt.create("order", "{\"n\":1}", WriteOption.key("k".repeat(256))));
    assertEquals("INVALID_ARGUMENT", tooLong.reason());
    assertEquals("key", tooLong.violations().get(0).field());
  }
}
