// The AWS SDK for JavaScript v3's SNS client (SNS speaks the Query protocol) against a
// Conveyor server: node sns_client.mjs ENDPOINT NAME. A topic fans out to two queues, one
// with raw delivery and a filter policy; prints what each queue got as JSON for
// tests/server/test_js_sdk.py.
import {
  SNSClient,
  CreateTopicCommand,
  SubscribeCommand,
  PublishCommand,
  PublishBatchCommand,
  ListSubscriptionsByTopicCommand,
  DeleteTopicCommand,
  ListTopicsCommand,
} from "@aws-sdk/client-sns";
import {
  SQSClient,
  CreateQueueCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
} from "@aws-sdk/client-sqs";
import { config, errorName, name } from "./v3_client.mjs";

const sns = new SNSClient(config);
const sqs = new SQSClient(config);

async function queue(suffix) {
  const url = (await sqs.send(new CreateQueueCommand({ QueueName: `${name}-${suffix}` }))).QueueUrl;
  const arn = (
    await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ["QueueArn"] }))
  ).Attributes.QueueArn;
  return { url, arn };
}

async function drain(url) {
  const got = await sqs.send(
    new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, MessageAttributeNames: ["All"] }),
  );
  return (got.Messages ?? []).map((m) => ({
    body: m.Body,
    attributes: Object.fromEntries(
      Object.entries(m.MessageAttributes ?? {}).map(([k, v]) => [k, v.StringValue ?? Array.from(v.BinaryValue)]),
    ),
  }));
}

const seen = {};
const topicArn = (await sns.send(new CreateTopicCommand({ Name: name }))).TopicArn;
seen.topicArn = topicArn;
const raw = await queue("raw");
const wrapped = await queue("wrapped");
await sns.send(
  new SubscribeCommand({
    TopicArn: topicArn,
    Protocol: "sqs",
    Endpoint: raw.arn,
    Attributes: { RawMessageDelivery: "true", FilterPolicy: JSON.stringify({ color: ["red"] }) },
  }),
);
await sns.send(new SubscribeCommand({ TopicArn: topicArn, Protocol: "sqs", Endpoint: wrapped.arn }));
seen.protocols = (
  await sns.send(new ListSubscriptionsByTopicCommand({ TopicArn: topicArn }))
).Subscriptions.map((s) => s.Protocol);
const red = { color: { DataType: "String", StringValue: "red" } };
seen.publishedId = (
  await sns.send(
    new PublishCommand({
      TopicArn: topicArn,
      Message: "red <&> ✓",
      Subject: "hi",
      MessageAttributes: { ...red, bytes: { DataType: "Binary", BinaryValue: new Uint8Array([1, 2, 255]) } },
    }),
  )
).MessageId;
await sns.send(
  new PublishCommand({
    TopicArn: topicArn,
    Message: "blue",
    MessageAttributes: { color: { DataType: "String", StringValue: "blue" } },
  }),
);
const batch = await sns.send(
  new PublishBatchCommand({
    TopicArn: topicArn,
    PublishBatchRequestEntries: [
      { Id: "one", Message: "batch red", MessageAttributes: red },
      { Id: "two", Message: "batch plain" },
    ],
  }),
);
seen.batch = [batch.Successful.map((s) => s.Id).sort(), (batch.Failed ?? []).length];
seen.raw = await drain(raw.url);
seen.wrapped = (await drain(wrapped.url)).map((m) => {
  const envelope = JSON.parse(m.body);
  return { type: envelope.Type, message: envelope.Message, topic: envelope.TopicArn, id: envelope.MessageId };
});
seen.missingTopic = await errorName(
  sns,
  new PublishCommand({ TopicArn: `${topicArn}-missing`, Message: "m" }),
);
await sns.send(new DeleteTopicCommand({ TopicArn: topicArn }));
seen.topicsAfter = ((await sns.send(new ListTopicsCommand({}))).Topics ?? []).map((t) => t.TopicArn);
console.log(JSON.stringify(seen));
