"""The one writer of the AWS Query protocol's XML, in the two ways its APIs use it."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from conveyor.server.front.query_xml import XML_DECLARATION, Entries, QueryXml

NS = "urn:test"
WRAPPED = QueryXml(NS, wrapped=True, escape=True)
REPEATED = QueryXml(
    NS,
    wrapped=False,
    escape=False,
    lists={"Messages": "Message"},
    maps={"Attributes": ("Attribute", "Name", "Value")},
    result_entries="Successful",
)


def parsed(document: bytes) -> ET.Element:
    assert document.startswith(XML_DECLARATION)
    return ET.fromstring(document[len(XML_DECLARATION) :])


def tag(el: ET.Element) -> str:
    return el.tag.split("}", 1)[1]


def test_wrapped_lists_have_members_and_maps_entries() -> None:
    """SNS's way: <member> per list item, <entry><key/><value/></entry> per map entry, text
    that XML cannot carry as \\uXXXX, and a CR written so that it comes back a CR."""
    result = {
        "Topics": [{"TopicArn": "a"}, {"TopicArn": "b"}],
        "Attributes": Entries({"Policy": "x\x00y", "Owner": "line\r\n"}),
    }
    root = parsed(WRAPPED.answer("ListTopics", result, "rid"))
    assert tag(root) == "ListTopicsResponse" and root.tag == f"{{{NS}}}ListTopicsResponse"
    body = root.find(f"{{{NS}}}ListTopicsResult")
    assert body is not None
    members = body.findall(f"{{{NS}}}Topics/{{{NS}}}member/{{{NS}}}TopicArn")
    assert [m.text for m in members] == ["a", "b"]
    entries = body.findall(f"{{{NS}}}Attributes/{{{NS}}}entry")
    got = {e.findtext(f"{{{NS}}}key"): e.findtext(f"{{{NS}}}value") for e in entries}
    assert got == {"Policy": "x\\u0000y", "Owner": "line\r\n"}
    assert root.findtext(f"{{{NS}}}ResponseMetadata/{{{NS}}}RequestId") == "rid"
    other = parsed(WRAPPED.answer("GetCallerIdentity", {}, "r", xmlns="urn:sts", with_result=False))
    assert other.tag == "{urn:sts}GetCallerIdentityResponse" and len(other) == 1


def test_repeated_lists_take_their_models_names() -> None:
    """SQS's way: an element per list item (named by the model where it names one), a
    map's entries by their (entry, key, value) names, batch results as <ActionResultEntry>,
    booleans as true/false, text as it is."""
    result = {
        "Messages": [{"Body": "hi", "Attributes": {"SentTimestamp": "1"}}],
        "QueueUrls": ["u1", "u2"],
        "Successful": [{"Id": "0", "Flag": True}],
    }
    root = parsed(REPEATED.answer("ReceiveMessage", result, "rid"))
    body = root.find(f"{{{NS}}}ReceiveMessageResult")
    assert body is not None
    message = body.find(f"{{{NS}}}Message")
    assert message is not None and message.findtext(f"{{{NS}}}Body") == "hi"
    attribute = message.find(f"{{{NS}}}Attribute")
    assert attribute is not None
    assert attribute.findtext(f"{{{NS}}}Name") == "SentTimestamp"
    assert attribute.findtext(f"{{{NS}}}Value") == "1"
    assert [u.text for u in body.findall(f"{{{NS}}}QueueUrls")] == ["u1", "u2"]
    entry = body.find(f"{{{NS}}}ReceiveMessageResultEntry")
    assert entry is not None and entry.findtext(f"{{{NS}}}Flag") == "true"


def test_errors_say_who_is_at_fault_and_carry_only_what_xml_can() -> None:
    for writer, detail in ((WRAPPED, False), (REPEATED, True)):
        root = parsed(
            writer.error(True, "InvalidParameter", "bad \ufffe name", "rid", detail=detail)
        )
        assert tag(root) == "ErrorResponse"
        error = root.find(f"{{{NS}}}Error")
        assert error is not None
        assert error.findtext(f"{{{NS}}}Type") == "Sender"
        assert error.findtext(f"{{{NS}}}Code") == "InvalidParameter"
        assert error.findtext(f"{{{NS}}}Message") == "bad \\ufffe name"
        assert (error.find(f"{{{NS}}}Detail") is not None) is detail
        assert root.findtext(f"{{{NS}}}RequestId") == "rid"
    server = parsed(REPEATED.error(False, "InternalError", "x", "r"))
    assert server.findtext(f"{{{NS}}}Error/{{{NS}}}Type") == "Receiver"
