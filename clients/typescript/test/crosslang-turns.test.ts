/**
 * A run whose first delivery a Python worker made is continued by a TypeScript one: the same
 * rule, the same model-turn key (docs/model-turns.md), so the TypeScript delivery replays the
 * turn the Python one recorded, makes the same tool call under the same id, and finds its
 * write already applied, with no model asked.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, test } from "node:test";

import { Client, deliver, type NeutralRequest, Parked, runToolCall, turnKey } from "../src/index.js";
import { REPO_DIR, type Sidecar, startSidecar } from "./sidecar.js";

let sidecar: Sidecar;
let client: Client;
before(async () => {
  sidecar = await startSidecar();
  client = new Client(sidecar.target);
});
after(async () => {
  client.close();
  await sidecar.stop();
});

const RULE = "crosslang";
// The Python worker's delivery: one turn of the model, recorded, and its tool call's write.
const PYTHON_WORKER = `
import json, sys
from actonce_client import Client
from actonce_client.deliveries import Codec, Lease, delivering
from actonce_client.model_turns import model_turn, request_form

target, run_id, thread = sys.argv[1:4]
request = request_form([{"role": "user", "content": "Tell the thread ada was charged"}], [])
answer = {"tool_calls": [{"id": "call_py_1", "name": "notice", "args": {"text": "charged ada 500"}}]}
same = Codec(lambda r: r, lambda r: r)
with Client(target) as client, delivering(client, run_id, "${RULE}", Lease()) as delivery:
    turn = delivery.turn(model_turn("model", request), lambda: answer, same)
    call = turn["tool_calls"][0]
    attempt = delivery.begin_tool(client, call["id"])
    written = attempt.notice(thread, call["args"]["text"])
    attempt.end()
print(json.dumps({"notice": written.id, "outcome": written.outcome.name}))
`;

test("a TypeScript delivery continues a run a Python delivery began: its turn replayed, its write found once", async () => {
  const runId = `run-${randomUUID()}`;
  const setup = await client.begin({ runId: `setup-${runId}`, rule: RULE });
  const thread = (await setup.createThread("cross-language")).id;
  await setup.end();

  const python = process.env["ACTONCE_PYTHON"] || join(REPO_DIR, ".venv", "bin", "python");
  const { stdout } = await promisify(execFile)(python, ["-c", PYTHON_WORKER, sidecar.target, runId, thread]);
  const first = JSON.parse(stdout) as { notice: string; outcome: string };
  assert.equal(first.outcome, "APPLIED");

  const request: NeutralRequest = { messages: [{ role: "user", content: "Tell the thread ada was charged" }], tools: [] };
  type Answer = { tool_calls: { id: string; name: string; args: { text: string } }[] };
  const result = await deliver(client, { runId, rule: RULE }, async (delivery) => {
    const turn = await delivery.turn(
      turnKey("model", request),
      async (): Promise<Answer> => assert.fail("the model was asked again"),
      { encode: (r) => r, decode: (r) => r as Answer },
    );
    const call = turn.tool_calls[0]!;
    assert.equal(call.id, "call_py_1");
    return runToolCall(call.id, (toolCall) => toolCall.attempt.notice(thread, call.args.text));
  });
  assert.ok(!(result instanceof Parked));
  assert.deepEqual([result.id, result.outcome], [first.notice, "ALREADY_APPLIED"]);
});
