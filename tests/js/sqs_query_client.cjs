// The AWS SDK for JavaScript v2, which speaks SQS's Query protocol (form-encoded requests,
// XML answers), against a Conveyor server: node sqs_query_client.cjs ENDPOINT NAME
// Prints what it saw as JSON; tests/server/test_js_sdk.py checks it. The SDK checks the
// MD5 of every body it sends and receives, and throws on a mismatch.
process.env.AWS_SDK_JS_SUPPRESS_MAINTENANCE_MODE_MESSAGE = "1";
const AWS = require("aws-sdk");

const [endpoint, name] = process.argv.slice(2);
const sqs = new AWS.SQS({
  endpoint,
  region: "us-east-1",
  apiVersion: "2012-11-05",
  credentials: new AWS.Credentials("AKIDJS", "secret"),
  maxRetries: 0,
});

async function errorCode(promise) {
  try {
    await promise;
    return null;
  } catch (error) {
    return error.code;
  }
}

(async () => {
  const seen = {};
  const queueUrl = (await sqs.createQueue({ QueueName: name }).promise()).QueueUrl;
  seen.queueUrl = queueUrl;
  await sqs
    .sendMessage({
      QueueUrl: queueUrl,
      MessageBody: "first <&> ✓ \u{1F600}",
      MessageAttributes: {
        text: { DataType: "String", StringValue: "héllo <b>" },
        raw: { DataType: "Binary", BinaryValue: Buffer.from([0, 1, 255]) },
      },
    })
    .promise();
  const batch = await sqs
    .sendMessageBatch({
      QueueUrl: queueUrl,
      Entries: Array.from({ length: 10 }, (_, i) => ({ Id: `e${i}`, MessageBody: `body ${i} &` })),
    })
    .promise();
  seen.batch = [batch.Successful.length, batch.Failed.length];
  const bodies = [];
  seen.deleteFailed = 0;
  for (let round = 0; round < 10 && bodies.length < 11; round++) {
    const got = await sqs
      .receiveMessage({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: 10,
        MessageAttributeNames: ["All"],
        AttributeNames: ["All"],
      })
      .promise();
    const messages = got.Messages || [];
    for (const m of messages) {
      bodies.push(m.Body);
      if (m.MessageAttributes) {
        seen.text = m.MessageAttributes.text.StringValue;
        seen.raw = Array.from(m.MessageAttributes.raw.BinaryValue);
        seen.receiveCount = m.Attributes.ApproximateReceiveCount;
      }
    }
    if (messages.length) {
      const deleted = await sqs
        .deleteMessageBatch({
          QueueUrl: queueUrl,
          Entries: messages.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle })),
        })
        .promise();
      seen.deleteFailed += deleted.Failed.length;
    }
  }
  seen.bodies = bodies.sort();
  const attributes = await sqs
    .getQueueAttributes({ QueueUrl: queueUrl, AttributeNames: ["All"] })
    .promise();
  seen.left = attributes.Attributes.ApproximateNumberOfMessages;
  await sqs.tagQueue({ QueueUrl: queueUrl, Tags: { team: "a&b" } }).promise();
  seen.tags = (await sqs.listQueueTags({ QueueUrl: queueUrl }).promise()).Tags;
  seen.listed = (await sqs.listQueues({ QueueNamePrefix: name }).promise()).QueueUrls;
  seen.errors = {
    missingQueue: await errorCode(sqs.getQueueUrl({ QueueName: `${name}-missing` }).promise()),
    badReceipt: await errorCode(
      sqs.deleteMessage({ QueueUrl: queueUrl, ReceiptHandle: "not-a-receipt" }).promise(),
    ),
    badAttribute: await errorCode(
      sqs
        .setQueueAttributes({ QueueUrl: queueUrl, Attributes: { VisibilityTimeout: "-1" } })
        .promise(),
    ),
  };
  await sqs.deleteQueue({ QueueUrl: queueUrl }).promise();
  seen.afterDelete = (await sqs.listQueues({ QueueNamePrefix: name }).promise()).QueueUrls || [];
  console.log(JSON.stringify(seen));
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
