package dev.actonce.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * Attempt capabilities against a real sidecar started with --agent-capabilities: a harness holds
 * the API token and begins attempts; the agent process it starts holds only its attempt's id and
 * capability, on a client with no token. That agent makes its own attempt's calls and begins its
 * delivery's tool calls, and cannot begin, fence or read another run.
 */
class CapabilityTest {
  private static final String TOKEN = "java-capability-t0ken-7f2a";
  private static Sidecar guarded;

  @BeforeAll
  static void start() throws Exception {
    Path tokenFile = Files.createTempDirectory("actonce-java-capability-").resolve("api.token");
    Files.writeString(tokenFile, TOKEN + "\n");
    guarded =
        Sidecar.start("--api-token-file", tokenFile.toString(), "--agent-capabilities", "true");
  }

  @AfterAll
  static void stop() throws Exception {
    guarded.close();
  }

  private static Run newRun() {
    return Run.of("run-" + UUID.randomUUID(), Sidecar.SEND_RULE, "cp");
  }

  private static void assertRefused(Executable call, String what) {
    ActonceException e = assertThrows(ActonceException.class, call, what);
    assertEquals(
        List.of(Status.Code.PERMISSION_DENIED, "CAPABILITY_REFUSED", FailureClass.PERMANENT),
        List.of(e.code(), e.reason(), e.failureClass()),
        what);
  }

  @Test
  void anAgentGivenOnlyItsCapabilityReachesOnlyItsAttempt() {
    try (ActonceClient harness =
            ActonceClient.connect(guarded.target, ActonceClient.DEFAULT_TIMEOUT, ApiToken.of(TOKEN));
        ActonceClient agent = ActonceClient.connect(guarded.target)) {
      Attempt mine = harness.begin(newRun());
      Run other = newRun();
      Attempt theirs = harness.begin(other);
      Write theirTicket = theirs.create("ticket", "{\"title\":\"theirs\"}");
      assertTrue(!mine.capability().isEmpty(), "the sidecar issues capabilities");
      assertNotEquals(mine.capability(), theirs.capability());

      // What the harness hands the agent: the attempt's id, its run and its capability.
      Attempt own = agent.attempt(mine.id(), mine.run(), mine.capability());
      Write ticket = own.create("ticket", "{\"title\":\"mine\"}");
      Write thread = own.createThread("Mine");
      own.notice(thread.id(), "filed " + ticket.id());
      assertEquals(ticket.id(), own.readArtifact(ticket.id()).id());
      Step step = own.beginStep("page", Effect.IDEMPOTENT_WRITE, "{\"who\":\"ops\"}");
      own.endStep(step.id(), "{\"paged\":true}");
      Attempt toolCall = own.beginScoped(mine.run().withScope("call_1"));
      assertTrue(!toolCall.capability().isEmpty());
      assertNotEquals(own.capability(), toolCall.capability());
      toolCall.notice(thread.id(), "from the tool call");

      // Another run: neither begun, nor fenced, nor read.
      ActonceException unauthenticated =
          assertThrows(ActonceException.class, () -> agent.begin(other));
      assertEquals(Status.Code.UNAUTHENTICATED, unauthenticated.code());
      for (Run run : List.of(other, mine.run())) {
        // An unscoped BeginAttempt carrying the agent's capability: a run's begin, or its fence.
        assertRefused(() -> own.beginScoped(run.withScope("")), "begin " + run.runId());
      }
      Attempt stolen = agent.attempt(theirs.id(), other, mine.capability());
      assertRefused(() -> stolen.readArtifact(theirTicket.id()), "read through another attempt");
      assertRefused(() -> stolen.create("ticket", "{\"title\":\"planted\"}"), "write there");
      Attempt forged = agent.attempt(theirs.id(), other, "acap1." + theirs.id() + ".forged");
      assertRefused(forged::end, "a forged capability");

      // The other run's attempt goes on, unfenced, with its own writes only.
      theirs.createThread("Theirs");
      assertEquals(2, theirs.end().applied());
      own.end();
    }
  }
}
