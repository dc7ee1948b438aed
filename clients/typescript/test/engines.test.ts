/**
 * The Node versions the client says it runs on are the ones everything it installs says
 * it runs on: a dependency that declares a newer Node than the client's own floor makes
 * `npm install` warn there, and fail where `engine-strict` is set.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

interface Locked {
  dev?: boolean;
  devOptional?: boolean;
  peer?: boolean;
  engines?: { node?: string } | string[];
}

const root = new URL("../../", import.meta.url);
const manifest = JSON.parse(readFileSync(new URL("package.json", root), "utf8")) as {
  engines: { node: string };
};
const lock = JSON.parse(readFileSync(new URL("package-lock.json", root), "utf8")) as {
  packages: Record<string, Locked>;
};

/** The major version a range of the form ">=N" starts at. */
function floorOf(range: string): number {
  const found = /^>=\s*(\d+)/.exec(range.trim());
  assert.ok(found, `the client's engines.node is not of the form >=N: ${range}`);
  return Number(found[1]);
}

/** Whether ``range`` (npm's engines.node, in the forms dependencies use) admits ``major``.0.0. */
function admits(range: string, major: number): boolean {
  return range.split("||").some((alternative) => {
    const text = alternative.trim();
    const atLeast = /^>=\s*(\d+)/.exec(text);
    if (atLeast) return major >= Number(atLeast[1]);
    const exact = /^(\d+)(\.\*|\.x)?$/.exec(text);
    if (exact) return major === Number(exact[1]);
    return text === "*" || text === "";
  });
}

test("every runtime dependency runs on the client's lowest Node", () => {
  const floor = floorOf(manifest.engines.node);
  const refusing = Object.entries(lock.packages)
    .filter(([path, entry]) => path !== "" && !entry.dev && !entry.devOptional && !entry.peer)
    .flatMap(([path, entry]) => {
      const node = Array.isArray(entry.engines) ? undefined : entry.engines?.node;
      return node !== undefined && !admits(node, floor) ? [`${path} needs node ${node}`] : [];
    });
  assert.deepEqual(refusing, [], `the client declares node ${manifest.engines.node}`);
});

test("the range reader tells a newer floor from an older one", () => {
  assert.equal(admits(">=22", 20), false);
  assert.equal(admits(">=18", 20), true);
  assert.equal(admits("6.* || 8.* || >= 10.*", 20), true);
  assert.equal(admits("^22", 20), false);
});
