/**
 * The client's own settings that cannot work, refused when the client is made,
 * before any call: a target written as a URL, no target at all, an API token
 * file that cannot be read. Each is an ActonceError (INVALID_ARGUMENT,
 * PERMANENT: a retried run would meet it again) whose one field violation
 * names the setting as it was given, the option or the environment variable.
 */
import { status } from "@grpc/grpc-js";

import { ActonceError } from "./errors.js";

/** Where the client finds the sidecar when no target is given: the deploy manifests set it. */
export const TARGET_ENV = "ACTONCE_TARGET";

// The name resolvers gRPC knows: a target with another scheme ("http://...") is
// a URL, which gRPC would take whole for a host name and answer UNAVAILABLE for ever.
const GRPC_SCHEMES: ReadonlySet<string> = new Set([
  "dns",
  "unix",
  "unix-abstract",
  "ipv4",
  "ipv6",
  "vsock",
  "xds",
  "passthrough",
]);

export function invalidSetting(setting: string, description: string): ActonceError {
  return new ActonceError(`${setting}: ${description}`, status.INVALID_ARGUMENT, "INVALID_ARGUMENT", "PERMANENT", {}, [
    { field: setting, description },
  ]);
}

/** The target to dial: the one given, else ACTONCE_TARGET; a URL or nothing is refused. */
export function resolveTarget(target: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  let setting = "target";
  if (target === undefined) {
    setting = TARGET_ENV;
    target = env[TARGET_ENV] ?? "";
    if (target === "") {
      throw invalidSetting(
        TARGET_ENV,
        "no target was given and it is not set: give the sidecar's HOST:PORT, as its --listen says " +
          "(127.0.0.1:50051 by default)",
      );
    }
  }
  if (target.trim() === "") throw invalidSetting(setting, "is empty: write the sidecar's HOST:PORT");
  const at = target.indexOf("://");
  if (at >= 0 && !GRPC_SCHEMES.has(target.slice(0, at).toLowerCase())) {
    const hostPort = target.slice(at + 3).split("/")[0] || "HOST:PORT";
    throw invalidSetting(
      setting,
      `"${target}" is a URL, not a gRPC target: write HOST:PORT (${hostPort}), with no scheme, ` +
        "or unix:///path for a socket",
    );
  }
  return target;
}
