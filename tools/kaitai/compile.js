// Compile a .ksy with the Kaitai Struct compiler (the npm package) for several languages.
//
//   node tools/kaitai/compile.js FILE.ksy LANG...
//
// Prints one JSON object on stdout: the compiler's version, the document as js-yaml parsed it
// (the check compares it with the document the generator wrote), and for each language
// either the generated files (name -> text) or the compiler's error message.
// Exit status: 0 every language compiled, 1 a language failed, 2 bad arguments or YAML.
"use strict";

const fs = require("fs");
const yaml = require("js-yaml");
const compiler = require("kaitai-struct-compiler");

async function main(argv) {
  if (argv.length < 2) {
    process.stderr.write("usage: node compile.js FILE.ksy LANG...\n");
    return 2;
  }
  const [path, ...languages] = argv;
  let ksy;
  try {
    ksy = yaml.load(fs.readFileSync(path, "utf8"));
  } catch (err) {
    process.stderr.write(`${path}: ${err.message}\n`);
    return 2;
  }
  const result = { version: compiler.version, document: ksy, files: {}, errors: {} };
  for (const language of languages) {
    try {
      // A fresh copy each time: the compiler must not see another run's changes.
      const input = JSON.parse(JSON.stringify(ksy));
      result.files[language] = await compiler.compile(language, input, null, false);
    } catch (err) {
      result.errors[language] = String(err && err.stack ? err.stack : err);
    }
  }
  process.stdout.write(JSON.stringify(result));
  return Object.keys(result.errors).length ? 1 : 0;
}

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
