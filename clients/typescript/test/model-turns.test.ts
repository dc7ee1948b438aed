/** A durable model turn's key, held to the shared vectors of docs/model-turn-vectors.json
 * that every client checks (docs/model-turns.md). */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { answeredCalls, canonicalRequest, type NeutralRequest, requestDigest, turnKey } from "../src/index.js";
import { REPO_DIR } from "./sidecar.js";

interface Vector {
  name: string;
  model: string;
  request: NeutralRequest;
  canonical: string;
  digest: string;
  key: { form: number; model: string; request: string };
}

const { vectors } = JSON.parse(readFileSync(join(REPO_DIR, "docs", "model-turn-vectors.json"), "utf8")) as {
  vectors: Vector[];
};

test("the vectors are there", () => assert.ok(vectors.length >= 5));

for (const vector of vectors) {
  test(`model-turn vector: ${vector.name}`, () => {
    assert.equal(canonicalRequest(vector.request), vector.canonical);
    assert.equal(requestDigest(vector.request), vector.digest);
    assert.deepEqual(turnKey(vector.model, vector.request), vector.key);
  });
}

test("tools are a set: the order they are offered in does not change the key", () => {
  const tool = (name: string) => ({ name, description: "", parameters: {} });
  const messages = [{ role: "user", content: "go" }];
  assert.equal(
    requestDigest({ messages, tools: [tool("b"), tool("a")] }),
    requestDigest({ messages, tools: [tool("a"), tool("b")] }),
  );
});

test("a tool result answers the first call with its id that no earlier result answered", () => {
  const calls = [
    { name: "lookup", arguments: { customer: "ada" } },
    { name: "lookup", arguments: { customer: "bob" } },
  ];
  const messages = answeredCalls([
    { role: "assistant", content: "", tool_calls: calls, callIds: ["c1", "c1"] },
    { role: "tool", callId: "c1" },
    { role: "tool", callId: "c1" },
    { role: "tool", callId: "nobody" },
  ]);
  assert.deepEqual(
    messages.map((m) => m.call),
    [undefined, 0, 1, null],
  );
  assert.ok(!("callIds" in messages[0]!));
});
