import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { ids } from "../src/index.js";
import { REPO_DIR } from "./sidecar.js";

interface Vector {
  name: string;
  write_type: ids.WriteType;
  run_id: string;
  checkpoint: string;
  input: Record<string, string>;
  identity: string[];
  occurrence: number;
  material: string;
  id: string;
}

const file = JSON.parse(readFileSync(join(REPO_DIR, "docs", "derived-id-vectors.json"), "utf8")) as {
  scheme_version: number;
  vectors: Vector[];
};

function identityOf(v: Vector): string[] {
  const given = (key: string): string => {
    const value = v.input[key];
    assert.ok(value !== undefined, `${v.name}: no ${key}`);
    return value;
  };
  switch (v.write_type) {
    case "create":
    case "create_proposal":
      return ids.createIdentity(given("kind"), given("data_json"));
    case "edit":
    case "edit_proposal":
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
    assert.equal(ids.idMaterial(v.write_type, v.run_id, v.checkpoint, identity, v.occurrence), v.material);
    assert.equal(ids.deriveId(v.write_type, v.run_id, v.checkpoint, identity, v.occurrence), v.id);
  });
}

test("paths the sidecar refuses are refused", () => {
  for (const path of ["", "status", "/items/-", "/a~2b", "/a~"]) {
    assert.throws(() => ids.normalizePath(path), RangeError, path);
  }
});
