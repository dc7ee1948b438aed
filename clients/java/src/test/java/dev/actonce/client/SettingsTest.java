package dev.actonce.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The client's own settings, refused when it connects, with what to write instead: a target
 * written as a URL, no target at all, an API token file that is not there. Each is an
 * ActonceException (INVALID_ARGUMENT, PERMANENT) naming the setting as it was given.
 */
class SettingsTest {
  private static Sidecar sidecar;

  @BeforeAll
  static void start() throws Exception {
    sidecar = Sidecar.start();
  }

  @AfterAll
  static void stop() throws Exception {
    sidecar.close();
  }

  private static String refused(ActonceException error, String setting) {
    assertEquals(Status.Code.INVALID_ARGUMENT, error.code());
    assertEquals("INVALID_ARGUMENT", error.reason());
    assertEquals(FailureClass.PERMANENT, error.failureClass());
    assertTrue(error.isPermanent());
    assertFalse(error.isRetryable());
    assertEquals(List.of(setting), error.violations().stream().map(v -> v.field()).toList());
    return error.getMessage();
  }

  @Test
  void aTargetWrittenAsAUrlIsRefusedAtOnceSayingToWriteHostPort() {
    for (String url :
        List.of("http://127.0.0.1:50051", "https://127.0.0.1:50051/", "grpc://127.0.0.1:50051")) {
      String message =
          refused(assertThrows(ActonceException.class, () -> ActonceClient.connect(url)), "target");
      assertTrue(message.contains("HOST:PORT (127.0.0.1:50051)") && message.contains(url), message);
    }
  }

  @Test
  void withoutATargetTheClientDialsActonceTarget() {
    String target = Settings.target(null, Map.of(ActonceClient.TARGET_ENV, sidecar.target));
    assertEquals(sidecar.target, target);
    try (ActonceClient client = ActonceClient.connect(target)) {
      Attempt attempt = client.begin(Run.of("run-target-" + UUID.randomUUID(), "triage", ""));
      assertEquals(Outcome.APPLIED, attempt.create("ticket", "{\"n\":1}").outcome());
    }
    Map<String, String> url = Map.of(ActonceClient.TARGET_ENV, "http://127.0.0.1:1");
    assertTrue(
        refused(
                assertThrows(ActonceException.class, () -> Settings.target(null, url)),
                ActonceClient.TARGET_ENV)
            .contains("is a URL"));
    assertTrue(
        refused(
                assertThrows(ActonceException.class, () -> Settings.target(null, Map.of())),
                ActonceClient.TARGET_ENV)
            .contains("HOST:PORT"));
  }

  @Test
  void aMissingTokenFileIsTheClientsErrorNamingWhereItWasGiven(@TempDir Path dir) {
    Path missing = dir.resolve("api.token");
    String given =
        refused(
            assertThrows(ActonceException.class, () -> ApiToken.fromFile(missing)),
            "ApiToken.fromFile");
    assertTrue(given.contains(missing.toString()), given);
    Map<String, String> env = Map.of(ApiToken.FILE_ENV, missing.toString());
    assertTrue(
        refused(
                assertThrows(ActonceException.class, () -> ApiToken.fromEnvironment(env)),
                ApiToken.FILE_ENV)
            .contains(missing.toString()));
  }
}
