"""The Query protocol: form requests in, the XML AWS documents out."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from conveyor import Client
from conveyor.server import ServerConfig

from ..support.live import LiveServer

NS = {"sqs": "http://queue.amazonaws.com/doc/2012-11-05/"}


def query(
    server: LiveServer, path: str = "/", **params: Any
) -> tuple[int, ET.Element, httpx.Response]:
    data = {"Version": "2012-11-05", **{k.replace("__", "."): str(v) for k, v in params.items()}}
    r = httpx.post(server.url + path, data=data)
    return r.status_code, ET.fromstring(r.content), r


def text(root: ET.Element, path: str) -> str | None:
    el = root.find(path, NS)
    return None if el is None else el.text


def test_create_send_receive_delete_in_documented_xml(server: LiveServer, name: str) -> None:
    status, root, r = query(
        server,
        Action="CreateQueue",
        QueueName=name,
        Attribute__1__Name="VisibilityTimeout",
        Attribute__1__Value="40",
        Tag__1__Key="team",
        Tag__1__Value="a",
    )
    assert status == 200 and r.headers["content-type"].startswith("text/xml")
    assert root.tag == f"{{{NS['sqs']}}}CreateQueueResponse"
    url = text(root, "sqs:CreateQueueResult/sqs:QueueUrl")
    assert url == f"{server.url}/000000000000/{name}"
    assert text(root, "sqs:ResponseMetadata/sqs:RequestId")

    path = f"/000000000000/{name}"  # Query clients post to the queue URL
    status, root, _ = query(
        server,
        path,
        Action="SendMessage",
        MessageBody="hello",
        MessageAttribute__1__Name="k",
        MessageAttribute__1__Value__DataType="String",
        MessageAttribute__1__Value__StringValue="v",
    )
    result = root.find("sqs:SendMessageResult", NS)
    assert result is not None
    assert [c.tag.split("}")[1] for c in result] == [
        "MD5OfMessageBody",
        "MD5OfMessageAttributes",
        "MessageId",
    ]
    assert text(result, "sqs:MD5OfMessageBody") == "5d41402abc4b2a76b9719d911017c592"

    status, root, _ = query(
        server,
        path,
        Action="ReceiveMessage",
        AttributeName__1="All",
        MessageAttributeName__1="All",
    )
    message = root.find("sqs:ReceiveMessageResult/sqs:Message", NS)
    assert message is not None
    assert text(message, "sqs:Body") == "hello"
    names = {
        text(a, "sqs:Name"): text(a, "sqs:Value") for a in message.findall("sqs:Attribute", NS)
    }
    assert names["ApproximateReceiveCount"] == "1"
    attr = message.find("sqs:MessageAttribute", NS)
    assert attr is not None and text(attr, "sqs:Name") == "k"
    assert text(attr, "sqs:Value/sqs:StringValue") == "v"
    assert text(attr, "sqs:Value/sqs:DataType") == "String"
    receipt = text(message, "sqs:ReceiptHandle")

    status, root, _ = query(
        server,
        path,
        Action="DeleteMessageBatch",
        DeleteMessageBatchRequestEntry__1__Id="a",
        DeleteMessageBatchRequestEntry__1__ReceiptHandle=receipt,
        DeleteMessageBatchRequestEntry__2__Id="b",
        DeleteMessageBatchRequestEntry__2__ReceiptHandle="forged",
    )
    result = root.find("sqs:DeleteMessageBatchResult", NS)
    assert result is not None
    assert text(result, "sqs:DeleteMessageBatchResultEntry/sqs:Id") == "a"
    failed = result.find("sqs:BatchResultErrorEntry", NS)
    assert failed is not None
    assert text(failed, "sqs:Id") == "b"
    assert text(failed, "sqs:Code") == "ReceiptHandleIsInvalid"
    assert text(failed, "sqs:SenderFault") == "true"

    status, root, _ = query(server, path, Action="GetQueueAttributes", AttributeName__1="All")
    attrs = {
        text(a, "sqs:Name"): text(a, "sqs:Value")
        for a in root.findall("sqs:GetQueueAttributesResult/sqs:Attribute", NS)
    }
    assert attrs["VisibilityTimeout"] == "40"
    status, root, _ = query(server, path, Action="ListQueueTags")
    tag = root.find("sqs:ListQueueTagsResult/sqs:Tag", NS)
    assert tag is not None and (text(tag, "sqs:Key"), text(tag, "sqs:Value")) == ("team", "a")
    status, root, _ = query(server, Action="ListQueues", QueueNamePrefix=name)
    assert [e.text for e in root.findall("sqs:ListQueuesResult/sqs:QueueUrl", NS)] == [url]


def test_errors_in_documented_xml(server: LiveServer) -> None:
    status, root, r = query(server, "/000000000000/missing-queue", Action="GetQueueAttributes")
    assert status == 400
    assert root.tag == f"{{{NS['sqs']}}}ErrorResponse"
    assert text(root, "sqs:Error/sqs:Type") == "Sender"
    assert text(root, "sqs:Error/sqs:Code") == "AWS.SimpleQueueService.NonExistentQueue"
    assert text(root, "sqs:Error/sqs:Message")
    assert text(root, "sqs:RequestId")
    status, root, _ = query(server, Action="Frobnicate")
    assert status == 400 and text(root, "sqs:Error/sqs:Code") == "InvalidAction"
    status, root, _ = query(server)
    assert status == 400 and text(root, "sqs:Error/sqs:Code") == "MissingParameter"
    status, root, _ = query(server, Action="CreateQueue", QueueName="q", Attribute__x__Name="a")
    assert status == 400 and text(root, "sqs:Error/sqs:Code") == "MalformedQueryString"
    r = httpx.post(server.url + "/", content=b"Action=ListQueues&" + b"x" * (5 * 1024 * 1024))
    assert r.status_code == 413
    assert text(ET.fromstring(r.content), "sqs:Error/sqs:Code") == "RequestEntityTooLarge"


def test_numbers_are_ascii_digits_and_nothing_else(server: LiveServer, name: str) -> None:
    """A number is a sign and ASCII digits: padding, underscores and other scripts' digits
    (all of which Python's int() takes) are refused as SQS refuses them, and nothing is
    sent or changed."""
    status, root, _ = query(server, Action="CreateQueue", QueueName=name)
    assert status == 200
    path = f"/000000000000/{name}"
    for bad in (" 5", "5 ", "1_0", "\u0661", "\uff15", "5.0", "0x5", ""):
        status, root, _ = query(
            server, path, Action="SendMessage", MessageBody="m", DelaySeconds=bad
        )
        if bad == "":  # an empty parameter is an absent one
            assert status == 200
            continue
        assert status == 400, bad
        assert text(root, "sqs:Error/sqs:Code") == "InvalidParameterValue"
        assert text(root, "sqs:Error/sqs:Message") == (
            f"Value {bad} for parameter DelaySeconds is invalid. Reason: Must be between 0 and"
            " 900, if provided."
        )
        status, root, _ = query(
            server,
            path,
            Action="SetQueueAttributes",
            Attribute__1__Name="VisibilityTimeout",
            Attribute__1__Value=bad,
        )
        assert status == 400 and text(root, "sqs:Error/sqs:Code") == "InvalidAttributeValue"
    for good in ("+5", "05", "5"):
        status, root, _ = query(
            server, path, Action="SendMessage", MessageBody="m", DelaySeconds=good
        )
        assert status == 200, good
    status, root, _ = query(server, path, Action="GetQueueAttributes", AttributeName__1="All")
    values = {
        text(a, "sqs:Name"): text(a, "sqs:Value")
        for a in root.iterfind("sqs:GetQueueAttributesResult/sqs:Attribute", NS)
    }
    assert values["VisibilityTimeout"] == "30"
    assert values["ApproximateNumberOfMessagesDelayed"] == "3"
    assert values["ApproximateNumberOfMessages"] == "1"


def test_a_carriage_return_survives_the_xml(server: LiveServer, name: str) -> None:
    status, root, _ = query(server, Action="CreateQueue", QueueName=name)
    url = text(root, "sqs:CreateQueueResult/sqs:QueueUrl")
    assert status == 200 and url
    body = "line 1\r\nline 2\rend"
    status, _, _ = query(server, Action="SendMessage", QueueUrl=url, MessageBody=body)
    assert status == 200
    status, root, r = query(server, Action="ReceiveMessage", QueueUrl=url)
    assert b"&#xD;" in r.content  # as SQS writes it
    assert text(root, "sqs:ReceiveMessageResult/sqs:Message/sqs:Body") == body


def test_percent_encoded_bytes_that_are_not_utf8_are_refused(server: LiveServer, name: str) -> None:
    """`%FF` or a cut-off `%C3` in a parameter is refused saying what to fix, in the body
    or the query string; nothing is stored (it was, with U+FFFD in place of the bytes)."""
    status, root, _ = query(server, Action="CreateQueue", QueueName=name)
    url = text(root, "sqs:CreateQueueResult/sqs:QueueUrl")
    assert status == 200 and url
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for body in (b"MessageBody=bad%FF%FE", b"MessageBody=cut%C3"):
        r = httpx.post(url, content=b"Action=SendMessage&" + body, headers=form)
        assert r.status_code == 400, r.text
        assert text(ET.fromstring(r.content), "sqs:Error/sqs:Code") == "MalformedQueryString"
        assert "percent-encode text as UTF-8" in r.text
    r = httpx.post(url + "?Action=SendMessage&MessageBody=x%FF")
    assert r.status_code == 400 and "not UTF-8" in r.text
    status, _, _ = query(server, Action="SendMessage", QueueUrl=url, MessageBody="café")
    assert status == 200
    status, root, _ = query(server, Action="ReceiveMessage", QueueUrl=url, MaxNumberOfMessages=10)
    assert text(root, "sqs:ReceiveMessageResult/sqs:Message/sqs:Body") == "café"


def test_a_query_get_asking_for_json_gets_json(server: LiveServer, name: str) -> None:
    query(server, Action="CreateQueue", QueueName=name)
    r = httpx.get(
        server.url + "/",
        params={"Action": "ListQueues", "QueueNamePrefix": name},
        headers={"Accept": "application/json"},
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    body = r.json()["ListQueuesResponse"]
    assert [u.rsplit("/", 1)[1] for u in body["ListQueuesResult"]["QueueUrls"]] == [name]
    assert body["ResponseMetadata"]["RequestId"] == r.headers["x-amzn-RequestId"]
    query(server, f"/000000000000/{name}", Action="SendMessage", MessageBody='{"a": "b\rc"}')
    r = httpx.get(
        server.url + "/",
        params={"Action": "ReceiveMessage", "QueueUrl": f"{server.url}/000000000000/{name}"},
        headers={"Accept": "application/json"},
    )
    result = r.json()["ReceiveMessageResponse"]["ReceiveMessageResult"]
    assert [m["Body"] for m in result["messages"]] == ['{"a": "b\rc"}']  # SQS's key


def test_a_parameter_read_two_ways_is_refused_and_nothing_runs(
    server: LiveServer, name: str
) -> None:
    """A name given twice with different values, a name that is both a value and a list,
    or one list place spelled twice (`.1` and `.01`) is refused before any action runs: a
    proxy that read the first `Action` must not see the server run the second."""
    _, root, _ = query(server, Action="CreateQueue", QueueName=name)
    url = text(root, "sqs:CreateQueueResult/sqs:QueueUrl")
    path = f"/000000000000/{name}"
    entry = "SendMessageBatchRequestEntry"
    for body, words in [
        ("Action=SendMessage&Action=DeleteQueue&MessageBody=x", "given twice"),
        (f"Action.x=DeleteQueue&QueueUrl={url}", "Action is a single value"),
        ("Action=SendMessage&MessageBody=x&MessageBody.1=y", "conflicts"),
        ("Action=SendMessage&MessageBody.1=y&MessageBody=x", "conflicts"),
        (
            f"Action=SendMessageBatch&{entry}.1.Id=a&{entry}.1.MessageBody=x"
            f"&{entry}.01.Id=b&{entry}.01.MessageBody=y",
            "without leading zeros",
        ),
        (f"Action=SendMessageBatch&{entry}.0.Id=a&{entry}.0.MessageBody=x", "from 1"),
    ]:
        r = httpx.post(
            server.url + path,
            content=body.encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        root = ET.fromstring(r.content)
        assert r.status_code == 400, (body, r.text)
        assert text(root, "sqs:Error/sqs:Code") == "MalformedQueryString", body
        assert words in (text(root, "sqs:Error/sqs:Message") or ""), (body, r.text)
    # the same value twice (in the query string and the form) is one parameter
    r = httpx.post(
        server.url + path + "?Action=SendMessage",
        content=b"Action=SendMessage&MessageBody=kept",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200, r.text
    _, root, _ = query(server, path, Action="ReceiveMessage", MaxNumberOfMessages=10)
    assert [e.text for e in root.findall(".//sqs:Message/sqs:Body", NS)] == ["kept"]


def test_sns_list_places_spelled_twice_are_refused(server: LiveServer) -> None:
    r = httpx.post(
        server.url + "/",
        data={
            "Action": "CreateTopic",
            "Name": "spelled-twice",
            "Tags.member.1.Key": "a",
            "Tags.member.1.Value": "x",
            "Tags.member.01.Key": "b",
            "Tags.member.01.Value": "y",
        },
    )
    assert r.status_code == 400, r.text
    assert "without leading zeros" in r.text


def test_forms_from_aws_samples_unindexed_attributes_and_a_trailing_slash(
    server: LiveServer, name: str
) -> None:
    """AWS's API reference writes SetQueueAttributes as `Attribute.Name=...&Attribute.Value=...`
    (no number), and some of its queue URLs end in a slash: both are taken."""
    status, root, _ = query(server, Action="CreateQueue", QueueName=name)
    url = text(root, "sqs:CreateQueueResult/sqs:QueueUrl")
    assert status == 200 and url
    status, _, r = query(
        server,
        f"/000000000000/{name}/",
        Action="SetQueueAttributes",
        Attribute__Name="VisibilityTimeout",
        Attribute__Value="35",
    )
    assert status == 200, r.text
    status, root, _ = query(
        server, Action="GetQueueAttributes", QueueUrl=url + "/", AttributeName__1="All"
    )
    attrs = {
        text(a, "sqs:Name"): text(a, "sqs:Value")
        for a in root.findall("sqs:GetQueueAttributesResult/sqs:Attribute", NS)
    }
    assert status == 200 and attrs["VisibilityTimeout"] == "35"


def test_host_urls_name_the_region_as_sqs_s_do(store: Client, name: str) -> None:
    """With --queue-urls host a queue URL is sqs.REGION.HOST/ACCOUNT/NAME in every region,
    so a client that reads account and name from the last two parts gets them; both forms
    are taken, and a server addressed by IP address still gives path URLs."""
    with LiveServer(store, ServerConfig(queue_urls="host")) as live:
        by_name = live.url.replace("127.0.0.1", "localhost")
        west = boto3.client(
            "sqs",
            endpoint_url=by_name,
            region_name="eu-west-1",
            aws_access_key_id="AKIDTEST",
            aws_secret_access_key="x",
        )
        url = west.create_queue(QueueName=name)["QueueUrl"]
        assert url == f"http://sqs.eu-west-1.localhost:{live.port}/000000000000/{name}"
        account, queue_name = url.split("/")[-2:]
        assert (account, queue_name) == ("000000000000", name)
        west.send_message(QueueUrl=url, MessageBody="west")
        path_form = f"{by_name}/queue/eu-west-1/000000000000/{name}"
        got = west.receive_message(QueueUrl=path_form)["Messages"]
        assert [m["Body"] for m in got] == ["west"]
        assert f"eu-west-1:000000000000:{name}" in store.list_queues()
        east = live.sqs()  # by IP address: path URLs
        east_url = east.create_queue(QueueName=name)["QueueUrl"]
        assert east_url == f"{live.url}/000000000000/{name}"
        east.send_message(QueueUrl=east_url, MessageBody="east")
        host_form = f"http://sqs.us-east-1.localhost:{live.port}/000000000000/{name}"
        assert [m["Body"] for m in east.receive_message(QueueUrl=host_form)["Messages"]] == ["east"]
        # an unsigned request to sqs.REGION.HOST is that region's, as SQS's endpoints are
        unsigned = httpx.post(
            live.url,
            data={"Action": "GetQueueUrl", "QueueName": name, "Version": "2012-11-05"},
            headers={"Host": f"sqs.eu-west-1.localhost:{live.port}"},
        )
        assert f"<QueueUrl>{url}</QueueUrl>" in unsigned.text, unsigned.text
        with pytest.raises(ClientError) as exc:  # signed for us-east-1, named eu-west-1
            east.receive_message(QueueUrl=url)
        assert "NonExistentQueue" in str(exc.value) or "QueueDoesNotExist" in str(exc.value)
        west.delete_queue(QueueUrl=url)
        east.delete_queue(QueueUrl=east_url)


def test_path_urls_take_a_host_as_a_host(server: LiveServer, name: str) -> None:
    """Without --queue-urls host, a server called sqs.internal.example.com is not region
    `internal`."""
    sqs = server.sqs()
    sqs.create_queue(QueueName=name)
    url = f"http://sqs.internal.example.com/000000000000/{name}"
    sqs.send_message(QueueUrl=url, MessageBody="m")
    assert sqs.receive_message(QueueUrl=url)["Messages"][0]["Body"] == "m"


def test_a_dedup_scope_changed_later_keeps_queue_wide_dedup(server: LiveServer, name: str) -> None:
    """As SQS answered in LocalStack's recorded test: a FIFO queue made with queue-wide
    de-duplication and set to messageGroup shows messageGroup, and de-duplicates across
    groups still, old ids and new; set back, it shows queue."""
    sqs = server.sqs()
    url = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={"FifoQueue": "true", "DeduplicationScope": "queue"},
    )["QueueUrl"]

    def send(body: str, group: str, dedup: str) -> None:
        sqs.send_message(
            QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=dedup
        )

    send("one", "g1", "same")
    changes = {"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}
    sqs.set_queue_attributes(QueueUrl=url, Attributes=changes)
    shown = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert shown["DeduplicationScope"] == "messageGroup"
    assert shown["FifoThroughputLimit"] == "perMessageGroupId"
    send("two", "g2", "same")  # an old id in another group: a duplicate still
    send("three", "g3", "new")
    send("four", "g4", "new")  # a new id in another group: a duplicate too
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["one", "three"]
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
    )
    shown = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DeduplicationScope"])
    assert shown["Attributes"]["DeduplicationScope"] == "queue"
    sqs.delete_queue(QueueUrl=url)
