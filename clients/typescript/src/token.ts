/**
 * The API token a sidecar started with --api-token-file asks every call for,
 * sent as "authorization: Bearer <token>". It comes from, in this order: the
 * client's apiToken or apiTokenFile, the file named by ACTONCE_API_TOKEN_FILE,
 * the value of ACTONCE_API_TOKEN; with none of them, no token is sent. A token
 * that cannot work (a file that cannot be read, an empty token) is an
 * ActonceError naming where it came from (./settings.ts). A file
 * is read again at most once a second, so that a Secret rotated in place is
 * followed without a restart; a file that cannot be read then keeps the token
 * read last.
 */
import { readFileSync } from "node:fs";

import { invalidSetting } from "./settings.js";

export const API_TOKEN_FILE_ENV = "ACTONCE_API_TOKEN_FILE";
export const API_TOKEN_ENV = "ACTONCE_API_TOKEN";
export const REREAD_MS = 1000;

function checked(token: string, source: string, setting: string): string {
  const trimmed = token.trim();
  if (trimmed === "") throw invalidSetting(setting, `the API token from ${source} is empty`);
  // It travels as an HTTP/2 header value, which cannot hold these.
  if (!/^[\x21-\x7e]+$/.test(trimmed)) {
    throw invalidSetting(setting, `the API token from ${source} holds whitespace, control or non-ASCII`);
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

  /** A token given as it is; ``setting`` names where it came from, for the error. */
  static fromValue(value: string, setting = "apiToken"): ApiToken {
    return new ApiToken(checked(value, "the client's apiToken", setting), undefined, Date.now);
  }

  /** A token read from ``path``: one that cannot be read is an ActonceError naming ``setting``. */
  static fromFile(path: string, clock: () => number = Date.now, setting = "apiTokenFile"): ApiToken {
    let text: string;
    try {
      text = readFileSync(path, "utf8");
    } catch (error) {
      throw invalidSetting(setting, `the API token file ${path} cannot be read: ${(error as Error).message}`);
    }
    return new ApiToken(checked(text, `the file ${path}`, setting), path, clock);
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
    if (env[API_TOKEN_FILE_ENV]) return ApiToken.fromFile(env[API_TOKEN_FILE_ENV], Date.now, API_TOKEN_FILE_ENV);
    if (env[API_TOKEN_ENV]) return ApiToken.fromValue(env[API_TOKEN_ENV], API_TOKEN_ENV);
    return undefined;
  }

  private static read(path: string): string {
    return checked(readFileSync(path, "utf8"), path, "apiTokenFile");
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
