/**
 * The sidecar's checks of a write's inputs, made before an id is derived
 * locally: an id derived from an input the sidecar refuses would name nothing.
 * Each check throws what the sidecar answers, an ActonceError with its
 * INVALID_ARGUMENT code, reason and class and one field violation naming the
 * same field. docs/derived-id-vectors.json lists the refused inputs
 * ("refusals") that the tests hold these checks to.
 */
import { status } from "@grpc/grpc-js";

import { ActonceError } from "./errors.js";

const MAX_JSON_BYTES = 1 << 20; // UTF-8 bytes of a *_json field
const MAX_JSON_DEPTH = 64; // nested arrays and objects
const MAX_TEXT_BYTES = 64 << 10; // a notice's or message's text, a checkpoint
const MAX_NAME_BYTES = 512; // kind, title, ids, tool names
const MAX_PATH_BYTES = MAX_NAME_BYTES * 8;
const MAX_KEY_BYTES = 255; // a key the caller chooses
const SAFE_INTEGER = BigInt(Number.MAX_SAFE_INTEGER);

/** The error the sidecar answers for a bad field. */
export function invalidInput(field: string, description: string): ActonceError {
  return new ActonceError(`${field}: ${description}`, status.INVALID_ARGUMENT, "INVALID_ARGUMENT", "REFUSED", {}, [
    { field, description },
  ]);
}

/**
 * One of an enum's names, as the client sends it: anything else (a typo from untyped
 * JavaScript) is refused before a request is made, an ActonceError of INVALID_ARGUMENT and
 * class PERMANENT (the calling code's mistake, not the model's: a later try makes it again)
 * naming the field and the names it takes.
 */
export function checkChoice<K extends string>(value: unknown, field: string, allowed: Readonly<Record<K, unknown>>): K {
  if (typeof value === "string" && Object.hasOwn(allowed, value)) return value as K;
  const names = Object.keys(allowed).join(", ");
  const description = `is ${JSON.stringify(value) ?? String(value)}; it must be one of ${names}`;
  throw new ActonceError(`${field}: ${description}`, status.INVALID_ARGUMENT, "INVALID_ARGUMENT", "PERMANENT", {}, [
    { field, description },
  ]);
}

function utf8Bytes(value: string): number {
  return Buffer.byteLength(value, "utf8");
}

function hasLoneSurrogate(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const unit = value.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = value.charCodeAt(i + 1);
      if (!(next >= 0xdc00 && next <= 0xdfff)) return true;
      i++;
    } else if (unit >= 0xdc00 && unit <= 0xdfff) {
      return true;
    }
  }
  return false;
}

/** A non-empty string without NUL, within its byte limit. */
export function checkText(value: string, field: string, limit = MAX_TEXT_BYTES): string {
  if (value === "") throw invalidInput(field, "must not be empty");
  if (value.includes("\0")) throw invalidInput(field, "must not contain a NUL character");
  if (hasLoneSurrogate(value)) throw invalidInput(field, "must be valid Unicode: it has a lone surrogate");
  const size = utf8Bytes(value);
  if (size > limit) throw invalidInput(field, `is ${size} bytes; the limit is ${limit}`);
  return value;
}

/** A kind, title, id or tool name. */
export function checkName(value: string, field: string): string {
  return checkText(value, field, MAX_NAME_BYTES);
}

/** A key the caller chose: 1 to 255 bytes of UTF-8, no NUL. */
export function checkKey(value: string): string {
  return checkText(value, "key", MAX_KEY_BYTES);
}

/** A checkpoint may be empty; it has no NUL and is within 64 KiB. */
export function checkCheckpoint(value: string): string {
  if (utf8Bytes(value) > MAX_TEXT_BYTES) throw invalidInput("checkpoint", `is longer than ${MAX_TEXT_BYTES} bytes`);
  if (value.includes("\0")) throw invalidInput("checkpoint", "must not contain a NUL character");
  if (hasLoneSurrogate(value)) throw invalidInput("checkpoint", "must be valid Unicode: it has a lone surrogate");
  return value;
}

/**
 * The tokens of an RFC 6901 pointer, refused as the sidecar refuses it: the
 * root, no leading '/', '~' not followed by 0 or 1, a last token "-" (an
 * append), more than 4096 bytes.
 */
export function pointerTokens(path: string): string[] {
  if (utf8Bytes(path) > MAX_PATH_BYTES) throw invalidInput("path", `is longer than ${MAX_PATH_BYTES} bytes`);
  if (path === "") throw invalidInput("path", "must not be the root: an edit sets one value inside");
  if (hasLoneSurrogate(path)) throw invalidInput("path", "must be valid Unicode: it has a lone surrogate");
  if (!path.startsWith("/")) throw invalidInput("path", "is not a JSON Pointer (RFC 6901): it must start with '/'");
  const tokens = path
    .slice(1)
    .split("/")
    .map((token) => {
      let out = "";
      for (let i = 0; i < token.length; i++) {
        if (token[i] !== "~") {
          out += token[i];
          continue;
        }
        const escaped = token[i + 1];
        if (escaped !== "0" && escaped !== "1") {
          throw invalidInput("path", "is not a JSON Pointer: '~' must be followed by 0 or 1");
        }
        out += escaped === "0" ? "~" : "/";
        i++;
      }
      return out;
    });
  if (tokens.at(-1) === "-") throw invalidInput("path", "must not end in '-': appends are refused, name each entry");
  return tokens;
}

/**
 * Refuses a *_json field the sidecar refuses: empty, over 1 MiB, not strict
 * JSON (RFC 8259), nested deeper than 64, with a duplicate key or a lone
 * surrogate, a number beyond a double, or an integer beyond 2^53 other than
 * the digits RFC 8785 writes for a double (those are that double, as the
 * sidecar reads them; any other would be rounded).
 */
export function checkJson(text: string, field: string): string {
  if (text === "") throw invalidInput(field, "must be JSON text, got an empty string");
  const size = utf8Bytes(text);
  if (size > MAX_JSON_BYTES) throw invalidInput(field, `is ${size} bytes; the limit is ${MAX_JSON_BYTES}`);
  const problem = new JsonScanner(text).check();
  if (problem !== undefined) throw invalidInput(field, problem);
  return text;
}

class Refusal {
  constructor(readonly description: string) {}
}

class JsonScanner {
  private pos = 0;

  constructor(private readonly text: string) {}

  check(): string | undefined {
    try {
      this.space();
      this.value(1);
      this.space();
      if (this.pos !== this.text.length) this.fail("extra data");
      return undefined;
    } catch (error) {
      if (error instanceof Refusal) return error.description;
      throw error;
    }
  }

  private fail(what: string): never {
    throw new Refusal(`is not valid JSON: ${what} at offset ${this.pos}`);
  }

  private space(): void {
    while (this.pos < this.text.length && " \t\n\r".includes(this.text[this.pos] as string)) this.pos++;
  }

  private value(depth: number): void {
    const c = this.text[this.pos];
    if (c === "{" || c === "[") {
      if (depth > MAX_JSON_DEPTH) throw new Refusal(`nests deeper than ${MAX_JSON_DEPTH} levels`);
      this.container(depth);
    } else if (c === '"') {
      this.string();
    } else if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) {
      this.number();
    } else {
      for (const literal of ["true", "false", "null"]) {
        if (this.text.startsWith(literal, this.pos)) {
          this.pos += literal.length;
          return;
        }
      }
      this.fail("expecting a value");
    }
  }

  private container(depth: number): void {
    const object = this.text[this.pos] === "{";
    const closing = object ? "}" : "]";
    this.pos++;
    this.space();
    if (this.text[this.pos] === closing) {
      this.pos++;
      return;
    }
    const keys = new Set<string>();
    for (;;) {
      if (object) {
        if (this.text[this.pos] !== '"') this.fail("expecting a key");
        const key = this.string();
        if (keys.has(key)) throw new Refusal(`is not valid JSON: duplicate key ${JSON.stringify(key)}`);
        keys.add(key);
        this.space();
        if (this.text[this.pos] !== ":") this.fail("expecting ':'");
        this.pos++;
        this.space();
      }
      this.value(depth + 1);
      this.space();
      const next = this.text[this.pos];
      if (next === ",") {
        this.pos++;
        this.space();
      } else if (next === closing) {
        this.pos++;
        return;
      } else {
        this.fail("expecting ',' or a closing bracket");
      }
    }
  }

  /** Reads a string and returns it decoded, refusing control characters, bad escapes and lone surrogates. */
  private string(): string {
    this.pos++; // the opening quote
    let out = "";
    for (;;) {
      const c = this.text[this.pos];
      if (c === undefined) this.fail("unterminated string");
      if (c === '"') {
        this.pos++;
        if (hasLoneSurrogate(out)) throw new Refusal("cannot be canonicalized (RFC 8785): a lone surrogate");
        return out;
      }
      if (c < " ") this.fail("a control character in a string");
      if (c !== "\\") {
        out += c;
        this.pos++;
        continue;
      }
      const escaped = this.text[this.pos + 1];
      if (escaped === "u") {
        const hex = this.text.slice(this.pos + 2, this.pos + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.fail("a bad \\u escape");
        out += String.fromCharCode(parseInt(hex, 16));
        this.pos += 6;
        continue;
      }
      const decoded = ESCAPES[escaped ?? ""];
      if (decoded === undefined) this.fail("a bad escape");
      out += decoded;
      this.pos += 2;
    }
  }

  private number(): void {
    NUMBER.lastIndex = this.pos;
    const match = NUMBER.exec(this.text);
    if (match === null) this.fail("a bad number");
    const token = match[0];
    const next = this.text[this.pos + token.length];
    if (next !== undefined && next >= "0" && next <= "9") this.fail("a leading zero");
    this.pos += token.length;
    const double = Number(token);
    if (!Number.isFinite(double)) throw new Refusal(`cannot be canonicalized (RFC 8785): ${token} is beyond a double`);
    const integral = match[1] === undefined && match[2] === undefined;
    if (integral) {
      const exact = BigInt(token);
      const beyond = exact > SAFE_INTEGER || -exact > SAFE_INTEGER;
      // For an integral double under 1e21, String() writes the digits RFC 8785 writes.
      if (beyond && (Math.abs(double) >= 1e21 || String(double) !== token)) {
        throw new Refusal(`cannot be canonicalized (RFC 8785): ${token} exceeds the safe integers and is no double's form`);
      }
    }
  }
}

const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;

const ESCAPES: Record<string, string> = {
  '"': '"',
  "\\": "\\",
  "/": "/",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
};
