import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { status } from "@grpc/grpc-js";

import { ActonceError, ids } from "../src/index.js";
import { REPO_DIR } from "./sidecar.js";

/** A vector's input string; a long one is written as {prefix, repeat, times, suffix}. */
type Text = string | { prefix: string; repeat: string; times: number; suffix: string };

function expand(value: Text | undefined): string {
  if (value === undefined || typeof value === "string") return value ?? "";
  return value.prefix + value.repeat.repeat(value.times) + value.suffix;
}

interface Vector {
  name: string;
  scheme_version: number;
  write_type: ids.WriteType;
  run_id: Text;
  scope: Text;
  checkpoint: Text;
  input: Record<string, Text>;
  identity: string[];
  occurrence: number;
  material: string;
  id: string;
  field: string;
}

const file = JSON.parse(readFileSync(join(REPO_DIR, "docs", "derived-id-vectors.json"), "utf8")) as {
  scheme_version: number;
  vectors: Vector[];
  refusals: Vector[];
};

function schemeOf(v: Vector): ids.IdScheme {
  return { version: v.scheme_version, scope: expand(v.scope) };
}

/** A vector whose input names a key is a write the caller named by it. */
function keyed(v: Vector): boolean {
  return v.input["key"] !== undefined;
}

function identityOf(v: Vector): string[] {
  const given = (key: string): string => {
    assert.ok(v.input[key] !== undefined, `${v.name}: no ${key}`);
    return expand(v.input[key]);
  };
  if (keyed(v)) {
    switch (v.write_type) {
      case "create":
      case "create_proposal":
        return ids.keyedCreateIdentity(given("kind"), given("key"));
      case "thread":
        return ids.keyedThreadIdentity(given("key"));
      case "step":
        return ids.keyedStepIdentity(given("tool"), given("key"));
      default:
        assert.fail(`${v.name}: a ${v.write_type} takes no key`);
    }
  }
  switch (v.write_type) {
    case "create":
    case "create_proposal":
      return ids.createIdentity(given("kind"), given("data_json"));
    case "edit_proposal":
      return ids.editProposalIdentity(
        given("artifact_id"),
        given("path"),
        v.scheme_version === 1 ? "" : given("value_json"),
        v.scheme_version,
      );
    case "edit":
      return ids.editIdentity(given("artifact_id"), given("path"));
    case "notice":
    case "message":
      return ids.postIdentity(given("thread_id"), given("text"));
    case "thread":
      return ids.threadIdentity(given("title"));
    case "step":
      return ids.stepIdentity(given("tool"), given("args_json"));
  }
}

test("the vectors are for this scheme", () => {
  assert.equal(file.scheme_version, ids.SCHEME_VERSION);
  assert.ok(file.vectors.length > 0);
});

for (const v of file.vectors) {
  test(`vector: ${v.name}`, () => {
    const identity = identityOf(v);
    assert.deepEqual(identity, v.identity);
    const [runId, checkpoint] = [expand(v.run_id), expand(v.checkpoint)];
    const scheme = schemeOf(v);
    if (keyed(v)) {
      assert.equal(ids.keyedIdMaterial(v.write_type, runId, checkpoint, identity, scheme), v.material);
      assert.equal(ids.deriveKeyedId(v.write_type, runId, checkpoint, identity, scheme), v.id);
      return;
    }
    assert.equal(ids.idMaterial(v.write_type, runId, checkpoint, identity, v.occurrence, scheme), v.material);
    assert.equal(ids.deriveId(v.write_type, runId, checkpoint, identity, v.occurrence, scheme), v.id);
    if (v.scheme_version === 1) {
      assert.equal(ids.deriveId(v.write_type, runId, checkpoint, identity, v.occurrence), v.id);
    }
  });
}

for (const v of file.refusals) {
  test(`refused as the sidecar refuses it: ${v.name}`, () => {
    const [runId, checkpoint] = [expand(v.run_id), expand(v.checkpoint)];
    assert.throws(
      () =>
        keyed(v)
          ? ids.deriveKeyedId(v.write_type, runId, checkpoint, identityOf(v), schemeOf(v))
          : ids.deriveId(v.write_type, runId, checkpoint, identityOf(v), 0, schemeOf(v)),
      (error: unknown) => {
        assert.ok(error instanceof ActonceError, String(error));
        assert.equal(error.code, status.INVALID_ARGUMENT);
        assert.equal(error.reason, "INVALID_ARGUMENT");
        assert.equal(error.failureClass, "REFUSED");
        assert.deepEqual(
          error.violations.map((violation) => violation.field),
          [v.field],
        );
        return true;
      },
    );
  });
}
