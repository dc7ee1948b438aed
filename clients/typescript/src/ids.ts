/**
 * Derived ids (docs/derived-ids.md, scheme versions 1 to 3), as the sidecar
 * derives them. Deriving one here lets an agent know an id before the write; the
 * tests hold this module to the scheme's test vectors. An input the sidecar
 * refuses throws the ActonceError the sidecar answers (INVALID_ARGUMENT,
 * naming the same field), before any id is derived from it.
 */
import canonicalize from "canonicalize";
import { createHash } from "node:crypto";

import { checkCheckpoint, checkJson, checkKey, checkName, checkText, invalidInput, pointerTokens } from "./inputs.js";

/**
 * The newest version. A run keeps the version it began with, which the
 * sidecar names when an attempt begins (Attempt.idScheme). Version 2 keys an
 * edit proposal to its value too and puts a scoped attempt's scope into its
 * ids; every other write keeps its version-1 id. Version 3 adds the writes
 * named by a key of the caller's (KeyOptions.key, deriveKeyedId); every write
 * without one keeps its version-2 id.
 */
export const SCHEME_VERSION = 3;

/** The first version whose runs take keys. */
const KEYED_SCHEME = 3;

/** The write types a caller may name by a key of its own. */
const KEYED_TYPES: readonly WriteType[] = ["create", "create_proposal", "thread", "step"];

/**
 * What an attempt's ids depend on beyond the write itself: the scheme version
 * the sidecar derives them with, and the attempt's scope (version 2 on).
 */
export interface IdScheme {
  readonly version: number;
  readonly scope?: string;
}

/** Version 1, unscoped: the scheme of an attempt begun before versions existed. */
export const VERSION_1: IdScheme = { version: 1 };

/** A type of write; each has its own id space. */
export type WriteType =
  | "create"
  | "create_proposal"
  | "edit"
  | "edit_proposal"
  | "notice"
  | "message"
  | "thread"
  | "step";

const PREFIXES: Record<WriteType, string> = {
  create: "art",
  create_proposal: "prp",
  edit: "edt",
  edit_proposal: "prp",
  notice: "msg",
  message: "msg",
  thread: "thr",
  step: "stp",
};

const ID_CHARS = 26; // base32 characters: 130 bits of SHA-256
const BASE32 = "abcdefghijklmnopqrstuvwxyz234567"; // RFC 4648, lowercased

/**
 * What is hashed: the RFC 8785 form of a JSON array, so that no choice of
 * strings can make two writes collide by concatenation. Version 2 has a
 * material of its own only for a scoped attempt or an edit proposal; any
 * other write keeps its version-1 material.
 */
export function idMaterial(
  writeType: WriteType,
  runId: string,
  checkpoint: string,
  identity: readonly string[],
  occurrence: number,
  scheme: IdScheme = VERSION_1,
): string {
  if (!Number.isSafeInteger(occurrence) || occurrence < 0) {
    throw new RangeError(`occurrence counts from 0, got ${occurrence}`);
  }
  const scope = checkScheme(runId, checkpoint, scheme);
  if (scheme.version === 1 || (scope === "" && writeType !== "edit_proposal")) {
    return canonical(["actonce/derived-id", 1, writeType, runId, checkpoint, identity, occurrence]);
  }
  return canonical(["actonce/derived-id", 2, writeType, runId, scope, checkpoint, identity, occurrence]);
}

/**
 * A keyed write's material, version 3's own: the scope is in it, scoped or not, and no
 * occurrence is (the key names one write, however often the attempt makes it). A run of
 * version 1 or 2 takes no key: refused as the sidecar refuses it, naming the field key.
 */
export function keyedIdMaterial(
  writeType: WriteType,
  runId: string,
  checkpoint: string,
  identity: readonly string[],
  scheme: IdScheme,
): string {
  const scope = checkScheme(runId, checkpoint, scheme);
  if (scheme.version < KEYED_SCHEME) {
    throw invalidInput(
      "key",
      `run ${runId} derives its ids under scheme ${scheme.version}, which has no keys: make this write ` +
        `without a key, or begin the run anew on a sidecar with --id-scheme ${KEYED_SCHEME}`,
    );
  }
  if (!KEYED_TYPES.includes(writeType)) throw new RangeError(`a ${writeType} takes no key`);
  return canonical(["actonce/derived-id", KEYED_SCHEME, writeType, runId, scope, checkpoint, identity]);
}

/** The id of the write a keyed identity names (keyedCreateIdentity, ...) in an attempt. */
export function deriveKeyedId(
  writeType: WriteType,
  runId: string,
  checkpoint: string,
  identity: readonly string[],
  scheme: IdScheme,
): string {
  return idOf(writeType, keyedIdMaterial(writeType, runId, checkpoint, identity, scheme));
}

/** The scheme's version known, the run, scope and checkpoint checked; the scope. */
function checkScheme(runId: string, checkpoint: string, scheme: IdScheme): string {
  if (!Number.isInteger(scheme.version) || scheme.version < 1 || scheme.version > SCHEME_VERSION) {
    throw new RangeError(`unknown id scheme version ${scheme.version}`);
  }
  const scope = scheme.scope ?? "";
  checkName(runId, "run_id");
  if (scope !== "") {
    if (scheme.version === 1) throw new RangeError("a scope has no version-1 form");
    checkName(scope, "scope");
  }
  checkCheckpoint(checkpoint);
  return scope;
}

function idOf(writeType: WriteType, material: string): string {
  const digest = createHash("sha256").update(material).digest();
  return `${PREFIXES[writeType]}_${base32(digest).slice(0, ID_CHARS)}`;
}

/** The id of the occurrence-th write (from 0) of identity in an attempt. */
export function deriveId(
  writeType: WriteType,
  runId: string,
  checkpoint: string,
  identity: readonly string[],
  occurrence: number,
  scheme: IdScheme = VERSION_1,
): string {
  return idOf(writeType, idMaterial(writeType, runId, checkpoint, identity, occurrence, scheme));
}

/** A create is its kind and the digest of its data's canonical form. */
export function createIdentity(kind: string, dataJson: string): [string, string] {
  checkName(kind, "kind");
  return [kind, sha256(canonical(JSON.parse(checkJson(dataJson, "data_json"))))];
}

/** An edit is its artifact and normalized path, not its value. */
export function editIdentity(artifactId: string, path: string): [string, string] {
  checkName(artifactId, "artifact_id");
  return [artifactId, normalizePath(path)];
}

/**
 * An edit proposal is its artifact and normalized path, and from version 2
 * the digest of the value it proposes (a draft for review: another value is
 * another proposal).
 */
export function editProposalIdentity(artifactId: string, path: string, valueJson: string, version: number): string[] {
  const identity = editIdentity(artifactId, path);
  if (version === 1) return identity;
  return [...identity, sha256(canonical(JSON.parse(checkJson(valueJson, "value_json"))))];
}

/** A notice or message is its thread and the digest of its exact text. */
export function postIdentity(threadId: string, text: string): [string, string] {
  checkName(threadId, "thread_id");
  checkText(text, "text");
  return [threadId, sha256(text)];
}

/** A thread is its title. */
export function threadIdentity(title: string): [string] {
  return [checkName(title, "title")];
}

/** A create named by a key is its kind and the key, not its data. */
export function keyedCreateIdentity(kind: string, key: string): [string, string] {
  return [checkName(kind, "kind"), checkKey(key)];
}

/** A thread named by a key is the key, not its title. */
export function keyedThreadIdentity(key: string): [string] {
  return [checkKey(key)];
}

/** A step named by a key is its tool and the key, not its arguments. */
export function keyedStepIdentity(tool: string, key: string): [string, string] {
  return [checkName(tool, "tool"), checkKey(key)];
}

/** A step is its tool and the digest of its arguments' canonical form. */
export function stepIdentity(tool: string, argsJson: string): [string, string] {
  checkName(tool, "tool");
  return [tool, sha256(canonical(JSON.parse(checkJson(argsJson, "args_json"))))];
}

/**
 * An RFC 6901 pointer re-encoded from its tokens: one spelling per path. The
 * root, a last token "-" (append) and a bad escape are refused, as the sidecar
 * refuses them.
 */
export function normalizePath(path: string): string {
  return pointerTokens(path)
    .map((token) => "/" + token.replaceAll("~", "~0").replaceAll("/", "~1"))
    .join("");
}

function canonical(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError("value has no JSON form");
  return text;
}

function sha256(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

function base32(bytes: Uint8Array): string {
  let out = "";
  let buffer = 0;
  let bits = 0;
  for (const byte of bytes) {
    buffer = ((buffer << 8) | byte) & 0xfff; // at most 12 bits are pending
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(buffer >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += BASE32[(buffer << (5 - bits)) & 31];
  return out;
}
