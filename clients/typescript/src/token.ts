/**
 * The API token a sidecar started with --api-token-file asks every call for,
 * sent as "authorization: Bearer <token>". It comes from, in this order: the
 * client's apiToken or apiTokenFile, the file named by ACTONCE_API_TOKEN_FILE,
 * the value of ACTONCE_API_TOKEN; with none of them, no token is sent. A file
 * is read again at most once a second, so that a Secret rotated in place is
 * followed without a restart; a file that cannot be read then keeps the token
 * read last.
 */
import { readFileSync } from "node:fs";

export const API_TOKEN_FILE_ENV = "ACTONCE_API_TOKEN_FILE";
export const API_TOKEN_ENV = "ACTONCE_API_TOKEN";
export const REREAD_MS = 1000;

function checked(token: string, source: string): string {
  const trimmed = token.trim();
  if (trimmed === "") throw new Error(`the API token from ${source} is empty`);
  // It travels as an HTTP/2 header value, which cannot hold these.
  if (!/^[\x21-\x7e]+$/.test(trimmed)) {
    throw new Error(`the API token from ${source} holds whitespace, control or non-ASCII`);
  }
  return trimmed;
}

export class ApiToken {
  #value: string;
  #readAt: number;

  private constructor(
    value: string,
    private readonly path: string | undefined,
    private readonly clock: () => number,
  ) {
    this.#value = value;
    this.#readAt = clock();
  }

  static fromValue(value: string): ApiToken {
    return new ApiToken(checked(value, "the client's apiToken"), undefined, Date.now);
  }

  static fromFile(path: string, clock: () => number = Date.now): ApiToken {
    return new ApiToken(ApiToken.read(path), path, clock);
  }

  /** The token the options name, else the environment's; undefined for none. */
  static resolve(
    options: { apiToken?: string; apiTokenFile?: string },
    env: NodeJS.ProcessEnv = process.env,
  ): ApiToken | undefined {
    if (options.apiToken !== undefined && options.apiTokenFile !== undefined) {
      throw new Error("an API token is either a value or a file");
    }
    if (options.apiToken !== undefined) return ApiToken.fromValue(options.apiToken);
    if (options.apiTokenFile !== undefined) return ApiToken.fromFile(options.apiTokenFile);
    if (env[API_TOKEN_FILE_ENV]) return ApiToken.fromFile(env[API_TOKEN_FILE_ENV]);
    if (env[API_TOKEN_ENV]) return ApiToken.fromValue(env[API_TOKEN_ENV]);
    return undefined;
  }

  private static read(path: string): string {
    return checked(readFileSync(path, "utf8"), path);
  }

  /** The token to send now. */
  value(): string {
    if (this.path !== undefined && this.clock() - this.#readAt >= REREAD_MS) {
      this.#readAt = this.clock();
      try {
        this.#value = ApiToken.read(this.path);
      } catch {
        // A Secret caught mid-update: the last token stays.
      }
    }
    return this.#value;
  }

  toString(): string {
    return this.path === undefined ? "ApiToken(value)" : `ApiToken(${this.path})`;
  }
}
