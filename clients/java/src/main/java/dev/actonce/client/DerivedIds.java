package dev.actonce.client;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.erdtman.jcs.JsonCanonicalizer;

/**
 * Derived ids (docs/derived-ids.md, scheme versions 1 to 3), as the sidecar derives them. Deriving one
 * here lets an agent know an id before the write; the tests hold this class to the scheme's test
 * vectors. An input the sidecar refuses throws the {@link ActonceException} the sidecar answers
 * (INVALID_ARGUMENT, naming the same field), before any id is derived from it.
 */
public final class DerivedIds {
  /**
   * The newest version. A run keeps the version it began with, which the sidecar names when an
   * attempt begins ({@link Attempt#idScheme()}). Version 2 keys an edit proposal to its value too
   * and puts a scoped attempt's scope into its ids; every other write keeps its version-1 id.
   * Version 3 adds the writes named by a key of the caller's ({@link WriteOption#key}, {@link
   * #deriveKeyedId}); every write without one keeps its version-2 id.
   */
  public static final int SCHEME_VERSION = 3;

  /** The first version whose runs take keys. */
  private static final int KEYED_SCHEME = 3;

  /** The write types a caller may name by a key of its own. */
  private static final Set<WriteType> KEYED_TYPES =
      EnumSet.of(WriteType.CREATE, WriteType.CREATE_PROPOSAL, WriteType.THREAD, WriteType.STEP);
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

  /**
   * What an attempt's ids depend on beyond the write itself: the scheme version the sidecar derives
   * them with, and the attempt's scope ("" for an unscoped attempt; version 2 on).
   */
  public record IdScheme(int version, String scope) {
    /** Version 1, unscoped: the scheme of an attempt begun before versions existed. */
    public static final IdScheme VERSION_1 = new IdScheme(1, "");

    public IdScheme {
      if (version < 1 || version > SCHEME_VERSION) {
        throw new IllegalArgumentException("unknown id scheme version " + version);
      }
      if (scope == null) {
        scope = "";
      }
      if (version == 1 && !scope.isEmpty()) {
        throw new IllegalArgumentException("a scope has no version-1 form");
      }
    }
  }

  private DerivedIds() {}

  /**
   * The id of the {@code occurrence}-th write (from 0) of {@code identity} in an unscoped attempt,
   * under scheme version 1.
   */
  public static String deriveId(
      WriteType type, String runId, String checkpoint, List<String> identity, int occurrence) {
    return deriveId(IdScheme.VERSION_1, type, runId, checkpoint, identity, occurrence);
  }

  /** The id of the {@code occurrence}-th write (from 0) of {@code identity} in an attempt. */
  public static String deriveId(
      IdScheme scheme,
      WriteType type,
      String runId,
      String checkpoint,
      List<String> identity,
      int occurrence) {
    byte[] digest = sha256(material(scheme, type, runId, checkpoint, identity, occurrence));
    return type.prefix + "_" + base32(digest).substring(0, ID_CHARS);
  }

  /** The material of an unscoped attempt's write under scheme version 1. */
  public static String material(
      WriteType type, String runId, String checkpoint, List<String> identity, int occurrence) {
    return material(IdScheme.VERSION_1, type, runId, checkpoint, identity, occurrence);
  }

  /**
   * What is hashed: the RFC 8785 form of a JSON array, so that no choice of strings can make two
   * writes collide by concatenation. Version 2 has a material of its own only for a scoped attempt
   * or an edit proposal; any other write keeps its version-1 material.
   */
  public static String material(
      IdScheme scheme,
      WriteType type,
      String runId,
      String checkpoint,
      List<String> identity,
      int occurrence) {
    if (occurrence < 0) {
      throw new IllegalArgumentException("occurrence counts from 0, got " + occurrence);
    }
    checkAttempt(scheme, runId, checkpoint);
    boolean own =
        scheme.version() >= 2
            && (!scheme.scope().isEmpty() || type == WriteType.EDIT_PROPOSAL);
    List<String> items = new ArrayList<>();
    items.add(quote("actonce/derived-id"));
    items.add(own ? "2" : "1");
    List<String> texts =
        own
            ? List.of(type.wireName(), runId, scheme.scope(), checkpoint)
            : List.of(type.wireName(), runId, checkpoint);
    for (String text : texts) {
      items.add(quote(text));
    }
    items.add(array(identity));
    items.add(Integer.toString(occurrence));
    return canonical("[" + String.join(",", items) + "]");
  }

  /**
   * The id of the write a keyed identity ({@link #keyedCreateIdentity}, {@link
   * #keyedThreadIdentity}, {@link #keyedStepIdentity}) names in an attempt. A keyed write has no
   * occurrence: the key names one write, however often the attempt makes it.
   */
  public static String deriveKeyedId(
      IdScheme scheme, WriteType type, String runId, String checkpoint, List<String> identity) {
    byte[] digest = sha256(keyedMaterial(scheme, type, runId, checkpoint, identity));
    return type.prefix + "_" + base32(digest).substring(0, ID_CHARS);
  }

  /**
   * A keyed write's material, version 3's own: the scope is in it, scoped or not, and no
   * occurrence is. A run of version 1 or 2 takes no key: refused as the sidecar refuses it, naming
   * the field key.
   */
  public static String keyedMaterial(
      IdScheme scheme, WriteType type, String runId, String checkpoint, List<String> identity) {
    checkAttempt(scheme, runId, checkpoint);
    if (scheme.version() < KEYED_SCHEME) {
      throw Inputs.invalid(
          "key",
          "run " + runId + " derives its ids under scheme " + scheme.version()
              + ", which has no keys: make this write without a key, or begin the run anew on a"
              + " sidecar with --id-scheme " + KEYED_SCHEME);
    }
    if (!KEYED_TYPES.contains(type)) {
      throw new IllegalArgumentException("a " + type.wireName() + " takes no key");
    }
    List<String> items = new ArrayList<>(List.of(quote("actonce/derived-id"), "3"));
    for (String text : List.of(type.wireName(), runId, scheme.scope(), checkpoint)) {
      items.add(quote(text));
    }
    items.add(array(identity));
    return canonical("[" + String.join(",", items) + "]");
  }

  private static void checkAttempt(IdScheme scheme, String runId, String checkpoint) {
    Inputs.name(runId, "run_id");
    if (!scheme.scope().isEmpty()) {
      Inputs.name(scheme.scope(), "scope");
    }
    Inputs.checkpoint(checkpoint);
  }

  private static String array(List<String> texts) {
    return "[" + String.join(",", texts.stream().map(DerivedIds::quote).toList()) + "]";
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

  /**
   * An edit proposal is its artifact and normalized path, and from version 2 the digest of the
   * value it proposes (a draft for review: another value is another proposal).
   */
  public static List<String> editProposalIdentity(
      String artifactId, String path, String valueJson, int version) {
    List<String> identity = editIdentity(artifactId, path);
    if (version == 1) {
      return identity;
    }
    // The canonicalizer takes an object or an array only: a value may be a scalar, and an array's
    // element is written as it would be alone (RFC 8785), so the one-element array is unwrapped.
    String wrapped = canonical("[" + Inputs.json(valueJson, "value_json") + "]", "value_json");
    String digest = hex(sha256(wrapped.substring(1, wrapped.length() - 1)));
    return List.of(identity.get(0), identity.get(1), digest);
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

  /** A create named by a key is its kind and the key, not its data. */
  public static List<String> keyedCreateIdentity(String kind, String key) {
    return List.of(Inputs.name(kind, "kind"), Inputs.key(key));
  }

  /** A thread named by a key is the key, not its title. */
  public static List<String> keyedThreadIdentity(String key) {
    return List.of(Inputs.key(key));
  }

  /** A step named by a key is its tool and the key, not its arguments. */
  public static List<String> keyedStepIdentity(String tool, String key) {
    return List.of(Inputs.name(tool, "tool"), Inputs.key(key));
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
