package dev.actonce.client;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.erdtman.jcs.JsonCanonicalizer;

/**
 * Derived ids (docs/derived-ids.md, scheme version 1), as the sidecar derives them. Deriving one
 * here lets an agent know an id before the write; the tests hold this class to the scheme's test
 * vectors. An input the sidecar refuses throws the {@link ActonceException} the sidecar answers
 * (INVALID_ARGUMENT, naming the same field), before any id is derived from it.
 */
public final class DerivedIds {
  public static final int SCHEME_VERSION = 1;
  private static final int ID_CHARS = 26; // base32 characters: 130 bits of SHA-256
  private static final String BASE32 = "abcdefghijklmnopqrstuvwxyz234567"; // RFC 4648, lowercased

  /** A type of write; each has its own id space. */
  public enum WriteType {
    CREATE("art"),
    CREATE_PROPOSAL("prp"),
    EDIT("edt"),
    EDIT_PROPOSAL("prp"),
    NOTICE("msg"),
    MESSAGE("msg"),
    THREAD("thr"),
    STEP("stp");

    private final String prefix;

    WriteType(String prefix) {
      this.prefix = prefix;
    }

    /** The scheme's name of the type, e.g. "create_proposal". */
    public String wireName() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  private DerivedIds() {}

  /** The id of the {@code occurrence}-th write (from 0) of {@code identity} in an attempt. */
  public static String deriveId(
      WriteType type, String runId, String checkpoint, List<String> identity, int occurrence) {
    byte[] digest = sha256(material(type, runId, checkpoint, identity, occurrence));
    return type.prefix + "_" + base32(digest).substring(0, ID_CHARS);
  }

  /**
   * What is hashed: the RFC 8785 form of a JSON array, so that no choice of strings can make two
   * writes collide by concatenation.
   */
  public static String material(
      WriteType type, String runId, String checkpoint, List<String> identity, int occurrence) {
    if (occurrence < 0) {
      throw new IllegalArgumentException("occurrence counts from 0, got " + occurrence);
    }
    Inputs.name(runId, "run_id");
    Inputs.checkpoint(checkpoint);
    List<String> items = new ArrayList<>();
    items.add(quote("actonce/derived-id"));
    items.add(Integer.toString(SCHEME_VERSION));
    for (String text : List.of(type.wireName(), runId, checkpoint)) {
      items.add(quote(text));
    }
    items.add("[" + String.join(",", identity.stream().map(DerivedIds::quote).toList()) + "]");
    items.add(Integer.toString(occurrence));
    return canonical("[" + String.join(",", items) + "]");
  }

  /** A create is its kind and the digest of its data's canonical form. */
  public static List<String> createIdentity(String kind, String dataJson) {
    Inputs.name(kind, "kind");
    return List.of(kind, hex(sha256(canonical(Inputs.json(dataJson, "data_json"), "data_json"))));
  }

  /** An edit is its artifact and normalized path, not its value. */
  public static List<String> editIdentity(String artifactId, String path) {
    Inputs.name(artifactId, "artifact_id");
    return List.of(artifactId, normalizePath(path));
  }

  /** A notice or message is its thread and the digest of its exact text. */
  public static List<String> postIdentity(String threadId, String text) {
    Inputs.name(threadId, "thread_id");
    Inputs.text(text, "text");
    return List.of(threadId, hex(sha256(text)));
  }

  /** A thread is its title. */
  public static List<String> threadIdentity(String title) {
    return List.of(Inputs.name(title, "title"));
  }

  /** A step is its tool and the digest of its arguments' canonical form. */
  public static List<String> stepIdentity(String tool, String argsJson) {
    Inputs.name(tool, "tool");
    return List.of(tool, hex(sha256(canonical(Inputs.json(argsJson, "args_json"), "args_json"))));
  }

  /**
   * An RFC 6901 pointer re-encoded from its tokens: one spelling per path. The root, a last token
   * "-" (append) and a bad escape are refused, as the sidecar refuses them.
   */
  public static String normalizePath(String path) {
    StringBuilder out = new StringBuilder();
    for (String token : Inputs.pointerTokens(path)) {
      out.append('/').append(token.replace("~", "~0").replace("/", "~1"));
    }
    return out.toString();
  }

  private static String canonical(String json) {
    try {
      return new JsonCanonicalizer(json).getEncodedString();
    } catch (IOException e) {
      throw new IllegalArgumentException("not canonical JSON (RFC 8785): " + e.getMessage(), e);
    }
  }

  private static String canonical(String json, String field) {
    try {
      // The canonicalizer takes only an object or an array; JSON text may be any value, and the
      // canonical form of [x] is "[" + that of x + "]".
      String wrapped = new JsonCanonicalizer("[" + json + "]").getEncodedString();
      return wrapped.substring(1, wrapped.length() - 1);
    } catch (IOException e) {
      throw Inputs.invalid(field, "cannot be canonicalized (RFC 8785): " + e.getMessage());
    }
  }

  private static final Map<Character, String> ESCAPES =
      Map.of('"', "\\\"", '\\', "\\\\", '\n', "\\n", '\r', "\\r", '\t', "\\t", '\b', "\\b", '\f', "\\f");

  // JSON text for a string; the canonicalizer then writes its one RFC 8785 form.
  private static String quote(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      String escaped = ESCAPES.get(c);
      if (escaped != null) {
        out.append(escaped);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }

  private static byte[] sha256(String text) {
    try {
      return MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("every Java platform has SHA-256", e);
    }
  }

  private static String hex(byte[] bytes) {
    return HexFormat.of().formatHex(bytes);
  }

  private static String base32(byte[] bytes) {
    StringBuilder out = new StringBuilder();
    int buffer = 0;
    int bits = 0;
    for (byte b : bytes) {
      buffer = ((buffer << 8) | (b & 0xff)) & 0xfff; // at most 12 bits are pending
      bits += 8;
      while (bits >= 5) {
        out.append(BASE32.charAt((buffer >>> (bits - 5)) & 31));
        bits -= 5;
      }
    }
    if (bits > 0) {
      out.append(BASE32.charAt((buffer << (5 - bits)) & 31));
    }
    return out.toString();
  }
}
