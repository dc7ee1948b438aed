package dev.actonce.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.grpc.Status;
import java.io.IOException;
import java.nio.file.Files;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Every case of docs/status-cases.json, answered for real by the stand-in sidecar
 * (clients/testkit/status_sidecar.py, raw trailers included), gives its typed result, never a
 * plain exception; the other three clients read the same file.
 */
class StatusCasesTest {
  private static Testkit fake;
  private static ActonceClient client;

  @BeforeAll
  static void start() throws IOException {
    fake = Testkit.start("status_sidecar.py");
    client = ActonceClient.connect(fake.target);
  }

  @AfterAll
  static void stop() throws IOException {
    client.close();
    fake.close();
  }

  private static List<JsonObject> cases() throws IOException {
    String text = Files.readString(Sidecar.REPO.resolve("docs/status-cases.json"));
    return JsonParser.parseString(text).getAsJsonObject().getAsJsonArray("cases").asList().stream()
        .map(JsonElement::getAsJsonObject)
        .toList();
  }

  @TestFactory
  Stream<DynamicTest> statusCases() throws IOException {
    List<JsonObject> cases = cases();
    assertFalse(cases.isEmpty());
    Attempt attempt = client.begin(Run.of("run-status-cases", "rule", ""));
    return cases.stream()
        .map(
            c ->
                DynamicTest.dynamicTest(
                    c.get("name").getAsString(),
                    () -> {
                      String name = c.get("name").getAsString();
                      String requestId = ActonceClient.newRequestId();
                      JsonObject expect = c.getAsJsonObject("expect");
                      WriteOption id = WriteOption.requestId(requestId);
                      if (expect.has("outcome")) {
                        Write written = attempt.create(name, "{}", id);
                        assertEquals(expect.get("outcome").getAsString(), written.outcome().name());
                        return;
                      }
                      JsonObject want = expect.getAsJsonObject("error");
                      ActonceException e =
                          assertThrows(ActonceException.class, () -> attempt.create(name, "{}", id));
                      assertEquals(want.get("code").getAsString(), e.code().name());
                      assertEquals(want.get("reason").getAsString(), e.reason());
                      assertEquals(want.get("failure_class").getAsString(), e.failureClass().name());
                      assertEquals(
                          want.getAsJsonArray("violations").asList().stream()
                              .map(JsonElement::getAsString)
                              .toList(),
                          e.violations().stream().map(ActonceException.FieldViolation::field).toList());
                      assertEquals(requestId, e.requestId());
                    }));
  }

  /**
   * A CANCELLED the caller caused itself, by interrupting its thread, says nothing of the sidecar:
   * it is UNKNOWN, not the RETRYABLE of a bare CANCELLED that reached the caller without its doing.
   */
  @Test
  void aCancellationOfTheCallersOwnIsNotRetryable() {
    Attempt attempt = client.begin(Run.of("run-status-cases", "rule", ""));
    Thread.currentThread().interrupt();
    try {
      ActonceException e =
          assertThrows(ActonceException.class, () -> attempt.create("outcome applied", "{}"));
      assertEquals(Status.Code.CANCELLED, e.code());
      assertEquals("CANCELLED", e.reason());
      assertEquals(FailureClass.UNKNOWN, e.failureClass());
    } finally {
      Thread.interrupted();
    }
  }
}
