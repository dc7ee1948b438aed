package dev.actonce.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.actonce.client.DerivedIds.WriteType;
import io.grpc.Status;
import java.io.IOException;
import java.nio.file.Files;
import java.util.List;
import java.util.Locale;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** The derived-id scheme's test vectors (docs/derived-id-vectors.json). */
class DerivedIdsTest {
  private static JsonObject vectors() throws IOException {
    String text = Files.readString(Sidecar.REPO.resolve("docs/derived-id-vectors.json"));
    return JsonParser.parseString(text).getAsJsonObject();
  }

  private static DerivedIds.IdScheme scheme(JsonObject v) {
    return new DerivedIds.IdScheme(v.get("scheme_version").getAsInt(), text(v, "scope"));
  }

  /** A vector whose input names a key is a write the caller named by it. */
  private static boolean keyed(JsonObject v) {
    return v.getAsJsonObject("input").has("key");
  }

  private static List<String> identity(WriteType type, JsonObject v) {
    JsonObject input = v.getAsJsonObject("input");
    int version = v.get("scheme_version").getAsInt();
    if (keyed(v)) {
      return switch (type) {
        case CREATE, CREATE_PROPOSAL ->
            DerivedIds.keyedCreateIdentity(text(input, "kind"), text(input, "key"));
        case THREAD -> DerivedIds.keyedThreadIdentity(text(input, "key"));
        case STEP -> DerivedIds.keyedStepIdentity(text(input, "tool"), text(input, "key"));
        default -> throw new AssertionError(text(v, "name") + ": a " + type + " takes no key");
      };
    }
    return switch (type) {
      case CREATE, CREATE_PROPOSAL ->
          DerivedIds.createIdentity(text(input, "kind"), text(input, "data_json"));
      case EDIT_PROPOSAL ->
          DerivedIds.editProposalIdentity(
              text(input, "artifact_id"),
              text(input, "path"),
              version == 1 ? "" : text(input, "value_json"),
              version);
      case EDIT -> DerivedIds.editIdentity(text(input, "artifact_id"), text(input, "path"));
      case NOTICE, MESSAGE -> DerivedIds.postIdentity(text(input, "thread_id"), text(input, "text"));
      case THREAD -> DerivedIds.threadIdentity(text(input, "title"));
      case STEP -> DerivedIds.stepIdentity(text(input, "tool"), text(input, "args_json"));
    };
  }

  // A vector's input string; a long one is written as {prefix, repeat, times, suffix}.
  private static String text(JsonObject object, String key) {
    JsonElement value = object.get(key);
    if (value.isJsonObject()) {
      JsonObject l = value.getAsJsonObject();
      return text(l, "prefix") + text(l, "repeat").repeat(l.get("times").getAsInt()) + text(l, "suffix");
    }
    return value.getAsString();
  }

  /** The id a refused vector would have, keyed or not. */
  private static String derive(JsonObject v, WriteType type) {
    String runId = text(v, "run_id");
    String checkpoint = text(v, "checkpoint");
    if (keyed(v)) {
      return DerivedIds.deriveKeyedId(scheme(v), type, runId, checkpoint, identity(type, v));
    }
    return DerivedIds.deriveId(scheme(v), type, runId, checkpoint, identity(type, v), 0);
  }

  @Test
  void theVectorsAreForThisScheme() throws IOException {
    JsonObject file = vectors();
    assertEquals(DerivedIds.SCHEME_VERSION, file.get("scheme_version").getAsInt());
    assertFalse(file.getAsJsonArray("vectors").isEmpty());
  }

  @TestFactory
  Stream<DynamicTest> vectorsMatch() throws IOException {
    return vectors().getAsJsonArray("vectors").asList().stream()
        .map(JsonElement::getAsJsonObject)
        .map(
            v ->
                DynamicTest.dynamicTest(
                    text(v, "name"),
                    () -> {
                      WriteType type =
                          WriteType.valueOf(text(v, "write_type").toUpperCase(Locale.ROOT));
                      List<String> identity = identity(type, v);
                      List<String> expected =
                          v.getAsJsonArray("identity").asList().stream()
                              .map(JsonElement::getAsString)
                              .toList();
                      assertEquals(expected, identity);
                      String runId = text(v, "run_id");
                      String checkpoint = text(v, "checkpoint");
                      int occurrence = v.get("occurrence").getAsInt();
                      DerivedIds.IdScheme scheme = scheme(v);
                      if (keyed(v)) {
                        assertEquals(
                            text(v, "material"),
                            DerivedIds.keyedMaterial(scheme, type, runId, checkpoint, identity));
                        assertEquals(
                            text(v, "id"),
                            DerivedIds.deriveKeyedId(scheme, type, runId, checkpoint, identity));
                        return;
                      }
                      assertEquals(
                          text(v, "material"),
                          DerivedIds.material(
                              scheme, type, runId, checkpoint, identity, occurrence));
                      assertEquals(
                          text(v, "id"),
                          DerivedIds.deriveId(
                              scheme, type, runId, checkpoint, identity, occurrence));
                      if (scheme.equals(DerivedIds.IdScheme.VERSION_1)) {
                        assertEquals(
                            text(v, "id"),
                            DerivedIds.deriveId(type, runId, checkpoint, identity, occurrence));
                      }
                    }));
  }

  @TestFactory
  Stream<DynamicTest> inputsTheSidecarRefusesAreRefusedNamingItsField() throws IOException {
    return vectors().getAsJsonArray("refusals").asList().stream()
        .map(JsonElement::getAsJsonObject)
        .map(
            v ->
                DynamicTest.dynamicTest(
                    text(v, "name"),
                    () -> {
                      WriteType type =
                          WriteType.valueOf(text(v, "write_type").toUpperCase(Locale.ROOT));
                      ActonceException e =
                          assertThrows(
                              ActonceException.class,
                              () -> derive(v, type));
                      assertEquals(Status.Code.INVALID_ARGUMENT, e.code());
                      assertEquals("INVALID_ARGUMENT", e.reason());
                      assertTrue(e.isRefused());
                      assertEquals(
                          List.of(text(v, "field")),
                          e.violations().stream().map(ActonceException.FieldViolation::field).toList());
                    }));
  }
}
