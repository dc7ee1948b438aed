package dev.actonce.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/**
 * A proxy (clients/testkit/holding_proxy.py) passes a create to the real sidecar, which makes the
 * ticket, and holds the answer until the client gives up at its deadline. Repeating the write as
 * the README shows, with the request_id taken from the error, gets the first answer back, and the
 * store holds one ticket, not two.
 */
class RepeatTest {
  @Test
  void aWriteHeldPastItsDeadlineIsRepeatedAsTheReadmeShows() throws Exception {
    try (Sidecar sidecar = Sidecar.start();
        Testkit proxy = Testkit.start("holding_proxy.py", sidecar.target);
        ActonceClient client = ActonceClient.connect(proxy.target, Duration.ofSeconds(1))) {
      Run run = Run.of("run-" + UUID.randomUUID(), "triage", "cp-1");
      Attempt attempt = client.begin(run);
      String data = "{\"title\": \"Disk full\", \"severity\": 2}";
      assertEquals("held", proxy.command("hold"));
      // The README's safe repeat:
      Write ticket;
      try {
        ticket = attempt.create("ticket", data);
      } catch (ActonceException e) {
        if (!e.isRetryable() || e.requestId().isEmpty()) {
          throw e;
        }
        // The outcome is unknown: repeat the same write with the same request_id.
        ticket = attempt.create("ticket", data, WriteOption.requestId(e.requestId()));
      }
      // End of the README's safe repeat.
      assertEquals("1", proxy.command("given-up"), "the first try was answered in time");

      List<String> identity = DerivedIds.createIdentity("ticket", data);
      String first = DerivedIds.deriveId(DerivedIds.WriteType.CREATE, run.runId(), "cp-1", identity, 0);
      String second = DerivedIds.deriveId(DerivedIds.WriteType.CREATE, run.runId(), "cp-1", identity, 1);
      assertEquals(first, ticket.id());
      assertEquals(Outcome.APPLIED, ticket.outcome());
      assertEquals(first, attempt.readArtifact(first).id());
      ActonceException missing = assertThrows(ActonceException.class, () -> attempt.readArtifact(second));
      assertEquals("NOT_FOUND", missing.reason());
      assertEquals(1, attempt.end().applied());
    }
  }

  private static String lines(String text) {
    return text.strip().lines().map(String::strip).collect(Collectors.joining("\n"));
  }

  @Test
  void theReadmeShowsTheRepeatThisTestMakes() throws Exception {
    String source = Files.readString(Path.of("src/test/java/dev/actonce/client/RepeatTest.java"));
    Matcher example =
        Pattern.compile("// The README's safe repeat:\n([\\s\\S]*?)\n\\s*// End of").matcher(source);
    assertTrue(example.find());
    assertTrue(lines(Files.readString(Path.of("README.md"))).contains(lines(example.group(1))));
  }
}
