/** The agents' tests run under the Node of the client's devDependencies (Node 22: the grid's
 * ledger is `node:sqlite`, and three frameworks declare Node 22), whichever Node runs npm. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { PACKAGE_DIR } from "../sidecar.js";

test("the agents' tests run under the Node of the devDependencies", () => {
  const { devDependencies } = JSON.parse(readFileSync(join(PACKAGE_DIR, "package.json"), "utf8")) as {
    devDependencies: Record<string, string>;
  };
  assert.equal(process.versions.node, devDependencies["node"]);
});
