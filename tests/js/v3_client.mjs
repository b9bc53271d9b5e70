// What the AWS SDK for JavaScript v3's clients here share: the command line
// (node CLIENT.mjs ENDPOINT NAME), the settings every client is made from (test keys, one
// attempt: a failure is the answer), and an error told by its name.
export const [endpoint, name] = process.argv.slice(2);
export const config = {
  endpoint,
  region: "us-east-1",
  credentials: { accessKeyId: "AKIDJS", secretAccessKey: "secret" },
  maxAttempts: 1,
};

// The name of the exception `client` throws for `command`, or null if it succeeds.
export async function errorName(client, command) {
  try {
    await client.send(command);
    return null;
  } catch (error) {
    return error.name;
  }
}
