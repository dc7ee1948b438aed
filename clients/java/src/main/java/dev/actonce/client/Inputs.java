package dev.actonce.client;

import io.grpc.Status;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.erdtman.jcs.NumberToJSON;

/**
 * The sidecar's checks of a write's inputs, made before an id is derived locally: an id derived
 * from an input the sidecar refuses would name nothing. Each check throws what the sidecar
 * answers, an {@link ActonceException} with its INVALID_ARGUMENT code, reason and class and one
 * field violation naming the same field. docs/derived-id-vectors.json lists the refused inputs
 * ("refusals") that the tests hold these checks to.
 */
final class Inputs {
  private static final int MAX_JSON_BYTES = 1 << 20; // UTF-8 bytes of a *_json field
  private static final int MAX_JSON_DEPTH = 64; // nested arrays and objects
  private static final int MAX_TEXT_BYTES = 64 << 10; // a text, a checkpoint
  private static final int MAX_NAME_BYTES = 512; // kind, title, ids, tool names
  private static final int MAX_PATH_BYTES = MAX_NAME_BYTES * 8;
  private static final int MAX_KEY_BYTES = 255; // a key the caller chooses
  private static final BigInteger SAFE_INTEGER = BigInteger.valueOf((1L << 53) - 1);

  private Inputs() {}

  /** The error the sidecar answers for a bad field. */
  static ActonceException invalid(String field, String description) {
    return new ActonceException(
        field + ": " + description,
        Status.Code.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        FailureClass.REFUSED,
        Map.of(),
        List.of(new ActonceException.FieldViolation(field, description)),
        null);
  }

  // UTF-8 bytes as the sidecar counts them: a lone surrogate is three.
  private static int utf8Bytes(String value) {
    int bytes = 0;
    for (int i = 0; i < value.length(); i++) {
      char c = value.charAt(i);
      if (c < 0x80) {
        bytes += 1;
      } else if (c < 0x800) {
        bytes += 2;
      } else if (Character.isHighSurrogate(c)
          && i + 1 < value.length()
          && Character.isLowSurrogate(value.charAt(i + 1))) {
        bytes += 4;
        i++;
      } else {
        bytes += 3;
      }
    }
    return bytes;
  }

  private static boolean hasLoneSurrogate(String value) {
    for (int i = 0; i < value.length(); i++) {
      char c = value.charAt(i);
      if (Character.isHighSurrogate(c)) {
        if (i + 1 >= value.length() || !Character.isLowSurrogate(value.charAt(i + 1))) {
          return true;
        }
        i++;
      } else if (Character.isLowSurrogate(c)) {
        return true;
      }
    }
    return false;
  }

  /** A non-empty string without NUL, within its byte limit. */
  static String text(String value, String field, int limit) {
    if (value.isEmpty()) {
      throw invalid(field, "must not be empty");
    }
    if (value.indexOf('\0') >= 0) {
      throw invalid(field, "must not contain a NUL character");
    }
    if (hasLoneSurrogate(value)) {
      throw invalid(field, "must be valid Unicode: it has a lone surrogate");
    }
    int size = utf8Bytes(value);
    if (size > limit) {
      throw invalid(field, "is " + size + " bytes; the limit is " + limit);
    }
    return value;
  }

  static String text(String value, String field) {
    return text(value, field, MAX_TEXT_BYTES);
  }

  /** A kind, title, id or tool name. */
  static String name(String value, String field) {
    return text(value, field, MAX_NAME_BYTES);
  }

  /** A key the caller chose: 1 to 255 bytes of UTF-8, no NUL. */
  static String key(String value) {
    return text(value, "key", MAX_KEY_BYTES);
  }

  /** A checkpoint may be empty; it has no NUL and is within 64 KiB. */
  static String checkpoint(String value) {
    if (utf8Bytes(value) > MAX_TEXT_BYTES) {
      throw invalid("checkpoint", "is longer than " + MAX_TEXT_BYTES + " bytes");
    }
    if (value.indexOf('\0') >= 0) {
      throw invalid("checkpoint", "must not contain a NUL character");
    }
    if (hasLoneSurrogate(value)) {
      throw invalid("checkpoint", "must be valid Unicode: it has a lone surrogate");
    }
    return value;
  }

  /**
   * The tokens of an RFC 6901 pointer, refused as the sidecar refuses it: the root, no leading
   * '/', '~' not followed by 0 or 1, a last token "-" (an append), more than 4096 bytes.
   */
  static List<String> pointerTokens(String path) {
    if (utf8Bytes(path) > MAX_PATH_BYTES) {
      throw invalid("path", "is longer than " + MAX_PATH_BYTES + " bytes");
    }
    if (path.isEmpty()) {
      throw invalid("path", "must not be the root: an edit sets one value inside");
    }
    if (hasLoneSurrogate(path)) {
      throw invalid("path", "must be valid Unicode: it has a lone surrogate");
    }
    if (!path.startsWith("/")) {
      throw invalid("path", "is not a JSON Pointer (RFC 6901): it must start with '/'");
    }
    List<String> tokens = new ArrayList<>();
    for (String token : path.substring(1).split("/", -1)) {
      StringBuilder out = new StringBuilder();
      for (int i = 0; i < token.length(); i++) {
        char c = token.charAt(i);
        if (c != '~') {
          out.append(c);
          continue;
        }
        char escaped = i + 1 < token.length() ? token.charAt(i + 1) : '\0';
        if (escaped != '0' && escaped != '1') {
          throw invalid("path", "is not a JSON Pointer: '~' must be followed by 0 or 1");
        }
        out.append(escaped == '0' ? '~' : '/');
        i++;
      }
      tokens.add(out.toString());
    }
    if (tokens.get(tokens.size() - 1).equals("-")) {
      throw invalid("path", "must not end in '-': appends are refused, name each entry");
    }
    return tokens;
  }

  /**
   * Refuses a *_json field the sidecar refuses: empty, over 1 MiB, not strict JSON (RFC 8259),
   * nested deeper than 64, with a duplicate key or a lone surrogate, a number beyond a double, or
   * an integer beyond 2^53 other than the digits RFC 8785 writes for a double (those are that
   * double, as the sidecar reads them; any other would be rounded).
   */
  static String json(String text, String field) {
    if (text.isEmpty()) {
      throw invalid(field, "must be JSON text, got an empty string");
    }
    int size = utf8Bytes(text);
    if (size > MAX_JSON_BYTES) {
      throw invalid(field, "is " + size + " bytes; the limit is " + MAX_JSON_BYTES);
    }
    try {
      new Scanner(text).check();
    } catch (Refusal refusal) {
      throw invalid(field, refusal.getMessage());
    }
    return text;
  }

  private static final class Refusal extends Exception {
    Refusal(String message) {
      super(message, null, false, false);
    }
  }

  private static final Pattern NUMBER =
      Pattern.compile("-?(?:0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?");

  private static final Map<Character, Character> ESCAPES =
      Map.of(
          '"', '"', '\\', '\\', '/', '/', 'b', '\b', 'f', '\f', 'n', '\n', 'r', '\r', 't', '\t');

  private static final class Scanner {
    private final String text;
    private int pos;

    Scanner(String text) {
      this.text = text;
    }

    void check() throws Refusal {
      space();
      value(1);
      space();
      if (pos != text.length()) {
        fail("extra data");
      }
    }

    private void fail(String what) throws Refusal {
      throw new Refusal("is not valid JSON: " + what + " at offset " + pos);
    }

    private char peek() {
      return pos < text.length() ? text.charAt(pos) : '\uffff';
    }

    private void space() {
      while (pos < text.length() && " \t\n\r".indexOf(text.charAt(pos)) >= 0) {
        pos++;
      }
    }

    private void value(int depth) throws Refusal {
      char c = peek();
      if (c == '{' || c == '[') {
        if (depth > MAX_JSON_DEPTH) {
          throw new Refusal("nests deeper than " + MAX_JSON_DEPTH + " levels");
        }
        container(depth);
      } else if (c == '"') {
        string();
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        number();
      } else {
        for (String literal : List.of("true", "false", "null")) {
          if (text.startsWith(literal, pos)) {
            pos += literal.length();
            return;
          }
        }
        fail("expecting a value");
      }
    }

    private void container(int depth) throws Refusal {
      boolean object = peek() == '{';
      char closing = object ? '}' : ']';
      pos++;
      space();
      if (peek() == closing) {
        pos++;
        return;
      }
      Set<String> keys = new HashSet<>();
      while (true) {
        if (object) {
          if (peek() != '"') {
            fail("expecting a key");
          }
          String key = string();
          if (!keys.add(key)) {
            throw new Refusal("is not valid JSON: duplicate key " + key);
          }
          space();
          if (peek() != ':') {
            fail("expecting ':'");
          }
          pos++;
          space();
        }
        value(depth + 1);
        space();
        char next = peek();
        if (next == ',') {
          pos++;
          space();
        } else if (next == closing) {
          pos++;
          return;
        } else {
          fail("expecting ',' or a closing bracket");
        }
      }
    }

    /** Reads a string and returns it decoded; refuses control characters, bad escapes, lone surrogates. */
    private String string() throws Refusal {
      pos++; // the opening quote
      StringBuilder out = new StringBuilder();
      while (true) {
        if (pos >= text.length()) {
          fail("unterminated string");
        }
        char c = text.charAt(pos);
        if (c == '"') {
          pos++;
          String decoded = out.toString();
          if (hasLoneSurrogate(decoded)) {
            throw new Refusal("cannot be canonicalized (RFC 8785): a lone surrogate");
          }
          return decoded;
        }
        if (c < 0x20) {
          fail("a control character in a string");
        }
        if (c != '\\') {
          out.append(c);
          pos++;
          continue;
        }
        char escaped = pos + 1 < text.length() ? text.charAt(pos + 1) : '\uffff';
        if (escaped == 'u') {
          if (pos + 6 > text.length()
              || !text.substring(pos + 2, pos + 6).matches("[0-9a-fA-F]{4}")) {
            fail("a bad \\u escape");
          }
          out.append((char) Integer.parseInt(text.substring(pos + 2, pos + 6), 16));
          pos += 6;
          continue;
        }
        Character decoded = ESCAPES.get(escaped);
        if (decoded == null) {
          fail("a bad escape");
        }
        out.append(decoded.charValue());
        pos += 2;
      }
    }

    private void number() throws Refusal {
      Matcher match = NUMBER.matcher(text).region(pos, text.length());
      if (!match.lookingAt()) {
        fail("a bad number");
      }
      String token = match.group();
      pos = match.end();
      if (pos < text.length() && text.charAt(pos) >= '0' && text.charAt(pos) <= '9') {
        fail("a leading zero");
      }
      double value = Double.parseDouble(token);
      if (Double.isInfinite(value)) {
        throw new Refusal("cannot be canonicalized (RFC 8785): " + token + " is beyond a double");
      }
      if (match.group(1) == null && match.group(2) == null) {
        boolean beyond = new BigInteger(token).abs().compareTo(SAFE_INTEGER) > 0;
        if (beyond && (Math.abs(value) >= 1e21 || !serialized(value).equals(token))) {
          throw new Refusal(
              "cannot be canonicalized (RFC 8785): "
                  + token
                  + " exceeds the safe integers and is no double's form");
        }
      }
    }
  }

  // The digits RFC 8785 writes for a double.
  private static String serialized(double value) {
    try {
      return NumberToJSON.serializeNumber(value);
    } catch (java.io.IOException e) {
      return "";
    }
  }
}
