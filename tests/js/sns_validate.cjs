// Verifies SNS messages with sns-validator, a widely used receiver-side check, unmodified
// but for the host pattern it trusts certificates from: node sns_validate.cjs HOSTPATTERN
// < messages (one JSON message a line); prints "valid" or the error for each.
const MessageValidator = require("sns-validator");
const readline = require("readline");

const validator = new MessageValidator(new RegExp(process.argv[2]));
const lines = readline.createInterface({ input: process.stdin });
const pending = [];
lines.on("line", (line) => {
  if (!line.trim()) return;
  pending.push(
    new Promise((resolve) => {
      validator.validate(JSON.parse(line), (err) => resolve(err ? `invalid: ${err.message}` : "valid"));
    }),
  );
});
lines.on("close", async () => {
  for (const result of await Promise.all(pending)) console.log(result);
});
