package dev.actonce.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;
import java.util.function.LongSupplier;

/**
 * The API token a sidecar started with {@code --api-token-file} asks every call for, sent as
 * {@code authorization: Bearer <token>}.
 *
 * <p>{@link ActonceClient#connect(String)} finds it in the environment: the file named by {@code
 * ACTONCE_API_TOKEN_FILE}, else the value of {@code ACTONCE_API_TOKEN}, else none; {@link
 * ActonceClient#connect(String, Duration, ApiToken)} takes one given. A file is read again at most
 * once a second, so that a Secret rotated in place is followed without a restart; a file that
 * cannot be read then keeps the token read last.
 */
public final class ApiToken {
  /** The variable naming the token's file (the same one the sidecar reads its own from). */
  public static final String FILE_ENV = "ACTONCE_API_TOKEN_FILE";

  /** The variable holding the token itself. */
  public static final String ENV = "ACTONCE_API_TOKEN";

  static final Duration REREAD = Duration.ofSeconds(1);

  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final Path path;
  private final LongSupplier nanoTime;
  private String value;
  private long readAt;

  private ApiToken(String value, Path path, LongSupplier nanoTime) {
    this.value = value;
    this.path = path;
    this.nanoTime = nanoTime;
    this.readAt = nanoTime.getAsLong();
  }

  /**
   * A token given as it is.
   *
   * @throws ActonceException (INVALID_ARGUMENT, PERMANENT) when it is no usable token
   */
  public static ApiToken of(String token) {
    return of(token, "ApiToken.of");
  }

  private static ApiToken of(String token, String setting) {
    return new ApiToken(checked(token, "the token given", setting), null, System::nanoTime);
  }

  /**
   * The token in {@code path}, followed as the file changes.
   *
   * @throws ActonceException (INVALID_ARGUMENT, PERMANENT) when the file cannot be read or holds
   *     no usable token, naming the setting
   */
  public static ApiToken fromFile(Path path) {
    return fromFile(path, System::nanoTime);
  }

  static ApiToken fromFile(Path path, LongSupplier nanoTime) {
    return fromFile(path, nanoTime, "ApiToken.fromFile");
  }

  private static ApiToken fromFile(Path path, LongSupplier nanoTime, String setting) {
    try {
      return new ApiToken(read(path, setting), path, nanoTime);
    } catch (UncheckedIOException e) {
      throw Settings.invalidSetting(
          setting, "the API token file " + path + " cannot be read: " + e.getCause());
    }
  }

  /** The token the environment names, if any. */
  public static Optional<ApiToken> fromEnvironment() {
    return fromEnvironment(System.getenv());
  }

  static Optional<ApiToken> fromEnvironment(Map<String, String> env) {
    String file = env.get(FILE_ENV);
    if (file != null && !file.isEmpty()) {
      return Optional.of(fromFile(Path.of(file), System::nanoTime, FILE_ENV));
    }
    String token = env.get(ENV);
    if (token != null && !token.isEmpty()) {
      return Optional.of(of(token, ENV));
    }
    return Optional.empty();
  }

  private static String read(Path path, String setting) {
    try {
      return checked(Files.readString(path, StandardCharsets.UTF_8), "the file " + path, setting);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read the API token file " + path, e);
    }
  }

  private static String checked(String token, String source, String setting) {
    String trimmed = token.strip();
    if (trimmed.isEmpty()) {
      throw Settings.invalidSetting(setting, "the API token from " + source + " is empty");
    }
    // It travels as an HTTP/2 header value, which cannot hold these.
    if (!trimmed.chars().allMatch(c -> c > 0x20 && c < 0x7f)) {
      throw Settings.invalidSetting(
          setting, "the API token from " + source + " holds whitespace, control or non-ASCII");
    }
    return trimmed;
  }

  /** The token to send now. */
  synchronized String value() {
    if (path != null && nanoTime.getAsLong() - readAt >= REREAD.toNanos()) {
      readAt = nanoTime.getAsLong();
      try {
        value = read(path, "ApiToken.fromFile");
      } catch (UncheckedIOException | ActonceException e) {
        // A Secret caught mid-update: the last token stays.
      }
    }
    return value;
  }

  /** The interceptor that puts the token on every call of a channel. */
  ClientInterceptor interceptor() {
    return new ClientInterceptor() {
      @Override
      public <Q, R> ClientCall<Q, R> interceptCall(
          MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
          @Override
          public void start(Listener<R> listener, Metadata headers) {
            headers.put(AUTHORIZATION, "Bearer " + value());
            super.start(listener, headers);
          }
        };
      }
    };
  }

  @Override
  public String toString() { // never the token itself
    return path == null ? "ApiToken(value)" : "ApiToken(" + path + ")";
  }
}
