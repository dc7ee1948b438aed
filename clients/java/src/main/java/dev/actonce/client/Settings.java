package dev.actonce.client;

import io.grpc.Status;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * The client's own settings that cannot work, refused when it connects, before any call: a
 * target written as a URL, no target at all, an API token file that cannot be read. Each is an
 * {@link ActonceException} (INVALID_ARGUMENT, PERMANENT: a retried run would meet it again) whose
 * one field violation names the setting as it was given, the argument or the environment
 * variable.
 */
final class Settings {
  // The name resolvers gRPC knows: a target with another scheme ("http://...") is a URL, which
  // gRPC would take whole for a host name and answer UNAVAILABLE for ever.
  private static final Set<String> GRPC_SCHEMES =
      Set.of("dns", "unix", "unix-abstract", "ipv4", "ipv6", "vsock", "xds", "passthrough");

  private Settings() {}

  static ActonceException invalidSetting(String setting, String description) {
    return new ActonceException(
        setting + ": " + description,
        Status.Code.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        FailureClass.PERMANENT,
        Map.of(),
        List.of(new ActonceException.FieldViolation(setting, description)),
        null);
  }

  /** The target to dial: {@code target} when given (not null), else ACTONCE_TARGET. */
  static String target(String target, Map<String, String> env) {
    String setting = "target";
    if (target == null) {
      setting = ActonceClient.TARGET_ENV;
      target = env.getOrDefault(ActonceClient.TARGET_ENV, "");
      if (target.isEmpty()) {
        throw invalidSetting(
            setting,
            "no target was given and it is not set: give the sidecar's HOST:PORT, as its --listen"
                + " says (127.0.0.1:50051 by default)");
      }
    }
    if (target.isBlank()) {
      throw invalidSetting(setting, "is empty: write the sidecar's HOST:PORT");
    }
    int at = target.indexOf("://");
    if (at >= 0 && !GRPC_SCHEMES.contains(target.substring(0, at).toLowerCase(Locale.ROOT))) {
      String hostPort = target.substring(at + 3).split("/", 2)[0];
      throw invalidSetting(
          setting,
          "\""
              + target
              + "\" is a URL, not a gRPC target: write HOST:PORT ("
              + (hostPort.isEmpty() ? "HOST:PORT" : hostPort)
              + "), with no scheme, or unix:///path for a socket");
    }
    return target;
  }
}
