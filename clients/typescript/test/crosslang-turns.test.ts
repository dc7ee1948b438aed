/**
 * A run whose first delivery a Python worker made is continued by a TypeScript one: the same
 * rule, the same model-turn key (docs/model-turns.md), so the TypeScript delivery replays the
 * turn the Python one recorded (its tool calls under the same ids, no model asked), finds
 * the write the Python delivery made already applied, makes the one it did not, and the
 * thread holds each once.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { promisify } from "node:util";
import { test } from "node:test";

import { deliver, type NeutralRequest, Parked, runToolCall, turnKey } from "../src/index.js";
import { liveSidecar, REPO_DIR } from "./sidecar.js";

const live = liveSidecar();

const RULE = "crosslang";
const ASKED = "Tell the thread ada was charged, then that her ticket is open";
// The Python worker's delivery: one turn of the model, recorded, with two tool calls; it
// makes the first call's write and dies before the second (it stops there).
const PYTHON_WORKER = `
import json, sys
from actonce_client import Client
from actonce_client.deliveries import Codec, Lease, delivering
from actonce_client.model_turns import model_turn, request_form

target, run_id, thread = sys.argv[1:4]
request = request_form([{"role": "user", "content": ${JSON.stringify(ASKED)}}], [])
answer = {"tool_calls": [
    {"id": "call_py_1", "name": "notice", "args": {"text": "charged ada 500"}},
    {"id": "call_py_2", "name": "notice", "args": {"text": "ticket open for ada"}},
]}
same = Codec(lambda r: r, lambda r: r)
turn = model_turn("model", request)
with Client(target) as client, delivering(client, run_id, "${RULE}", Lease()) as delivery:
    asked = delivery.turn(turn, lambda: answer, same)
    call = asked["tool_calls"][0]
    attempt = delivery.begin_tool(client, call["id"])
    written = attempt.notice(thread, call["args"]["text"])
    attempt.end()
print(json.dumps({"key": dict(turn.key), "notice": written.id, "outcome": written.outcome.name}))
`;

test("a TypeScript delivery continues a run a Python delivery began: its turn replayed, each write made once", async () => {
  const runId = `run-${randomUUID()}`;
  const setup = await live.client.begin({ runId: `setup-${runId}`, rule: RULE });
  const thread = (await setup.createThread("cross-language")).id;
  await setup.end();

  const python = process.env["ACTONCE_PYTHON"] || join(REPO_DIR, ".venv", "bin", "python");
  const { stdout } = await promisify(execFile)(python, ["-c", PYTHON_WORKER, live.sidecar.target, runId, thread]);
  const first = JSON.parse(stdout) as { key: unknown; notice: string; outcome: string };
  assert.equal(first.outcome, "APPLIED");

  const request: NeutralRequest = { messages: [{ role: "user", content: ASKED }], tools: [] };
  const key = turnKey("model", request);
  // The key the TypeScript delivery asks under is the one the Python delivery recorded under.
  assert.deepEqual(key, first.key);
  type Answer = { tool_calls: { id: string; name: string; args: { text: string } }[] };
  const result = await deliver(live.client, { runId, rule: RULE }, async (delivery) => {
    const turn = await delivery.turn(
      key,
      async (): Promise<Answer> => assert.fail("the model was asked again"),
      { encode: (r) => r, decode: (r) => r as Answer },
    );
    assert.deepEqual(
      turn.tool_calls.map((c) => c.id),
      ["call_py_1", "call_py_2"],
    );
    const written = [];
    for (const call of turn.tool_calls) {
      written.push(await runToolCall(call.id, (toolCall) => toolCall.attempt.notice(thread, call.args.text)));
    }
    return written;
  });
  assert.ok(!(result instanceof Parked));
  assert.deepEqual(
    result.map((w) => w.outcome),
    ["ALREADY_APPLIED", "APPLIED"],
  );
  assert.equal(result[0]!.id, first.notice);

  const reader = await live.client.begin({ runId: `read-${runId}`, rule: RULE });
  const texts = (await reader.readThread(thread)).filter((m) => m.kind === "notice").map((m) => m.text);
  await reader.end();
  assert.deepEqual(texts.sort(), ["charged ada 500", "ticket open for ada"]);
});
