/** docs/ai-sdk.md's complete agent runs as it stands there, under Node 22: the
 * code is taken from the page, a scripted model stands in the model's place and a card
 * processor in the card API's, and a run is delivered twice. */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, test } from "node:test";
import ts from "typescript";

import { PACKAGE_DIR, REPO_DIR, type Sidecar, startSidecar } from "../sidecar.js";
import { CardProcessor, scriptedModel } from "./scripted.js";

let sidecar: Sidecar;
let processor: CardProcessor;
before(async () => {
  sidecar = await startSidecar();
  processor = await new CardProcessor().start();
});
after(async () => {
  await processor.stop();
  await sidecar.stop();
});

test("the guide's complete agent writes once across two deliveries", async () => {
  const page = readFileSync(join(REPO_DIR, "docs", "ai-sdk.md"), "utf8");
  const code = /<!-- example: ts-ai-sdk-agent -->\n```ts\n([\s\S]*?)```/.exec(page)?.[1];
  assert.ok(code, "the guide has no complete agent");
  const { outputText } = ts.transpileModule(code, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  // Inside the package folder, "@actonce/client" resolves to the package itself.
  const script = join(PACKAGE_DIR, "build", "doc-agent.mjs");
  writeFileSync(script, outputText);
  process.env["ACTONCE_TARGET"] = sidecar.target;
  process.env["CARD_API"] = processor.url;
  const agent = (await import(pathToFileURL(script).href)) as {
    handle(runId: string, request: string, model: unknown): Promise<string>;
  };
  const model = scriptedModel([
    [
      ["open_ticket", { title: "Charge ada" }],
      ["charge_card", { customer: "ada", cents: 500 }],
    ],
    [],
  ]);
  const runId = `billing-${randomUUID()}`;
  assert.equal(await agent.handle(runId, "Charge ada 500", model), "done");
  assert.equal(await agent.handle(runId, "Charge ada 500", model), "done");
  assert.equal(model.calls, 2, "the second delivery asked the model again");
  assert.deepEqual(
    processor.charges.map((c) => [c.customer, c.cents]),
    [["ada", 500]],
  );
});
