// The AWS SDK for JavaScript v3 against a Conveyor server: node sqs_client.mjs ENDPOINT NAME
// Runs one scenario and prints what it saw as JSON; tests/server/test_js_sdk.py checks it.
// The SDK itself checks MD5OfMessageBody on sends and receives (and throws on a mismatch);
// MD5OfMessageAttributes is checked here against the algorithm SQS documents.
import { createHash } from "node:crypto";
import {
  SQSClient,
  CreateQueueCommand,
  SendMessageCommand,
  SendMessageBatchCommand,
  ReceiveMessageCommand,
  DeleteMessageBatchCommand,
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
} from "@aws-sdk/client-sqs";
import { config, errorName, name } from "./v3_client.mjs";

const sqs = new SQSClient(config);

// SQS's digest of message attributes: names sorted; each name, data type and value
// length-prefixed (4 bytes, big-endian), the value after a transport byte (1 string, 2 binary)
function attributesMd5(attributes) {
  const parts = [];
  const field = (bytes) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    parts.push(length, bytes);
  };
  for (const key of Object.keys(attributes).sort()) {
    const value = attributes[key];
    field(Buffer.from(key, "utf8"));
    field(Buffer.from(value.DataType, "utf8"));
    if (value.BinaryValue !== undefined) {
      parts.push(Buffer.from([2]));
      field(Buffer.from(value.BinaryValue));
    } else {
      parts.push(Buffer.from([1]));
      field(Buffer.from(value.StringValue, "utf8"));
    }
  }
  return createHash("md5").update(Buffer.concat(parts)).digest("hex");
}

const seen = {};
const queueUrl = (await sqs.send(new CreateQueueCommand({ QueueName: name }))).QueueUrl;
seen.queueUrl = queueUrl;

const attributes = {
  text: { DataType: "String", StringValue: "héllo ✓ \u{1F600}" },
  count: { DataType: "Number", StringValue: "12.50" },
  raw: { DataType: "Binary", BinaryValue: new Uint8Array([0, 1, 2, 254, 255]) },
  custom: { DataType: "String.tag", StringValue: "x" },
};
const one = await sqs.send(
  new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: "first ✓", MessageAttributes: attributes }),
);
seen.sendAttributesMd5Matches = one.MD5OfMessageAttributes === attributesMd5(attributes);

const batch = await sqs.send(
  new SendMessageBatchCommand({
    QueueUrl: queueUrl,
    Entries: Array.from({ length: 10 }, (_, i) => ({ Id: `e${i}`, MessageBody: `body ${i} ✓` })),
  }),
);
seen.batchSent = batch.Successful.length;
seen.batchFailed = (batch.Failed ?? []).length;

const bodies = [];
seen.receiveAttributesMd5Matches = [];
seen.binaryBack = null;
for (let round = 0; round < 10 && bodies.length < 11; round++) {
  const got = await sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: queueUrl,
      MaxNumberOfMessages: 10,
      MessageAttributeNames: ["All"],
      MessageSystemAttributeNames: ["All"],
    }),
  );
  const messages = got.Messages ?? [];
  for (const m of messages) {
    bodies.push(m.Body);
    if (m.MessageAttributes) {
      seen.receiveAttributesMd5Matches.push(
        m.MD5OfMessageAttributes === attributesMd5(m.MessageAttributes),
      );
      seen.binaryBack = Array.from(m.MessageAttributes.raw.BinaryValue);
      seen.textBack = m.MessageAttributes.text.StringValue;
      seen.receiveCount = m.Attributes.ApproximateReceiveCount;
    }
  }
  if (messages.length) {
    const deleted = await sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: messages.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle })),
      }),
    );
    seen.deleteFailed = (seen.deleteFailed ?? 0) + (deleted.Failed ?? []).length;
  }
}
seen.bodies = bodies.sort();
const counts = await sqs.send(
  new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ["All"] }),
);
seen.left = Number(counts.Attributes.ApproximateNumberOfMessages);
seen.inFlight = Number(counts.Attributes.ApproximateNumberOfMessagesNotVisible);

// a long poll woken by a send from another client
const started = Date.now();
const waiting = sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, WaitTimeSeconds: 10 }));
await new SQSClient(config).send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: "wake" }));
const woken = await waiting;
seen.wokenBody = woken.Messages?.[0]?.Body ?? null;
seen.wokenAfterMs = Date.now() - started;
await sqs.send(
  new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: woken.Messages[0].ReceiptHandle }),
);

// FIFO: order within a group, content-based de-duplication
const fifoUrl = (
  await sqs.send(
    new CreateQueueCommand({
      QueueName: `${name}.fifo`,
      Attributes: { FifoQueue: "true", ContentBasedDeduplication: "true" },
    }),
  )
).QueueUrl;
const firstSend = await sqs.send(
  new SendMessageCommand({ QueueUrl: fifoUrl, MessageBody: "a", MessageGroupId: "g" }),
);
const again = await sqs.send(
  new SendMessageCommand({ QueueUrl: fifoUrl, MessageBody: "a", MessageGroupId: "g" }),
);
const second = await sqs.send(
  new SendMessageCommand({ QueueUrl: fifoUrl, MessageBody: "b", MessageGroupId: "g" }),
);
seen.fifoDuplicateSameId = firstSend.MessageId === again.MessageId;
seen.fifoSequenceGrows = BigInt(second.SequenceNumber) > BigInt(firstSend.SequenceNumber);
const fifo = await sqs.send(
  new ReceiveMessageCommand({
    QueueUrl: fifoUrl,
    MaxNumberOfMessages: 10,
    MessageSystemAttributeNames: ["All"],
  }),
);
seen.fifoBodies = (fifo.Messages ?? []).map((m) => m.Body);
seen.fifoGroup = fifo.Messages?.[0]?.Attributes?.MessageGroupId ?? null;

// errors come back as the SDK's typed exceptions
seen.errors = {
  missingQueue: await errorName(sqs, new GetQueueUrlCommand({ QueueName: `${name}-missing` })),
  badReceipt: await errorName(
    sqs,
    new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: "not-a-receipt" }),
  ),
  tooMany: await errorName(
    sqs,
    new SendMessageBatchCommand({
      QueueUrl: queueUrl,
      Entries: Array.from({ length: 11 }, (_, i) => ({ Id: `x${i}`, MessageBody: "x" })),
    }),
  ),
  fifoWithoutGroup: await errorName(
    sqs,
    new SendMessageCommand({ QueueUrl: fifoUrl, MessageBody: "no group" }),
  ),
};

console.log(JSON.stringify(seen));
