/** The README's example is the one developers copy: it must run. */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import ts from "typescript";

import { PACKAGE_DIR, type Sidecar, startSidecar } from "./sidecar.js";

let sidecar: Sidecar;
before(async () => (sidecar = await startSidecar()));
after(async () => sidecar.stop());

test("the README example runs", async () => {
  const readme = readFileSync(join(PACKAGE_DIR, "README.md"), "utf8");
  const example = /```ts\n(import \{ Client \} from "@actonce\/client";\n[\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(example, "README.md has no runnable example");
  const { outputText } = ts.transpileModule(example.replace("127.0.0.1:50051", sidecar.target), {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  // Inside the package folder, "@actonce/client" resolves to the package itself.
  const script = join(PACKAGE_DIR, "build", "readme-example.mjs");
  writeFileSync(script, outputText);
  const { stdout } = await promisify(execFile)(process.execPath, [script]);
  assert.match(stdout, /^art_[a-z2-7]{26} (ALREADY_)?APPLIED\n$/);
});
