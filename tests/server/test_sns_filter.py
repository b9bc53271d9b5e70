"""SNS filter policies: each operator as AWS documents it, and the checks on a policy."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conveyor.server.sns.filter import PolicyError, check_policy, matches_attributes, matches_body


def attrs(**values: Any) -> dict[str, dict[str, str]]:
    out = {}
    for key, value in values.items():
        if isinstance(value, list):
            out[key] = {"DataType": "String.Array", "StringValue": json.dumps(value)}
        elif isinstance(value, bytes):
            out[key] = {"DataType": "Binary", "BinaryValue": "AA=="}
        elif isinstance(value, int | float):
            out[key] = {"DataType": "Number", "StringValue": str(value)}
        else:
            out[key] = {"DataType": "String", "StringValue": value}
    return out


@pytest.mark.parametrize(
    ("policy", "message", "expected"),
    [
        ({"k": ["a"]}, attrs(k="a"), True),
        ({"k": ["a"]}, attrs(k="A"), False),
        ({"k": ["a"]}, attrs(), False),
        ({"k": [5]}, attrs(k=5.0), True),
        ({"k": [5]}, attrs(k="5"), False),  # numbers match Number attributes only
        ({"k": ["5"]}, attrs(k=5), False),
        ({"k": [{"suffix": ".png"}]}, attrs(k="a.png"), True),
        ({"k": [{"equals-ignore-case": "EU"}]}, attrs(k="eu"), True),
        ({"k": [{"anything-but": {"prefix": "int-"}}]}, attrs(k="int-1"), False),
        ({"k": [{"anything-but": {"prefix": "int-"}}]}, attrs(k="ext-1"), True),
        ({"k": [{"anything-but": 3}]}, attrs(k=4), True),
        ({"k": [{"anything-but": 3}]}, attrs(k=3), False),
        ({"k": [{"numeric": ["=", 3.5]}]}, attrs(k=3.5), True),
        ({"k": [100.123456789]}, attrs(k=100.1234567), True),  # to 5 decimal places
        ({"k": [100.12345]}, attrs(k=100.12346), False),
        ({"k": [100, 500]}, {"k": {"DataType": "String.Array", "StringValue": "100"}}, True),
        ({"k": [False]}, attrs(k="false"), False),  # accepted, never matches an attribute
        ({"k": [{"numeric": ["<=", 0]}]}, attrs(k=-1), True),
        ({"k": [{"numeric": [">", 0]}]}, attrs(k="7"), False),
        ({"k": [{"exists": True}]}, attrs(k="x"), True),
        ({"k": [{"exists": True}]}, attrs(), False),
        ({"k": [{"exists": False}]}, attrs(j="x"), True),
        ({"k": [{"cidr": "10.0.0.0/24"}]}, attrs(k="10.0.0.7"), True),
        ({"k": [{"cidr": "10.0.0.0/24"}]}, attrs(k="10.0.1.7"), False),
        ({"k": ["b"]}, attrs(k=["a", "b"]), True),  # String.Array: one element matches
        ({"k": [{"anything-but": ["a"]}]}, attrs(k=["a"]), False),
        ({"k": ["AA=="]}, attrs(k=b"\0"), False),  # Binary attributes are never matched
        ({"k": [{"exists": True}]}, attrs(k=b"\0"), True),
        ({"k": ["a"], "j": ["b"]}, attrs(k="a", j="c"), False),  # AND across keys
        ({"k": ["a", {"prefix": "x"}]}, attrs(k="xyz"), True),  # OR within a key
        ({"$or": [{"k": ["a"]}, {"j": ["b"]}]}, attrs(j="b"), True),
        ({"$or": [{"k": ["a"]}, {"j": ["b"]}]}, attrs(j="c"), False),
    ],
)
def test_attribute_policies(policy: dict[str, Any], message: Any, expected: bool) -> None:
    check_policy(json.dumps(policy), "MessageAttributes")
    assert matches_attributes(policy, message) is expected


@pytest.mark.parametrize(
    ("policy", "body", "expected"),
    [
        ({"a": {"b": ["x"]}}, {"a": {"b": "x"}}, True),
        ({"a": {"b": ["x"]}}, {"a": {"b": "y"}}, False),
        ({"a": {"b": ["x"]}}, {"a": [{"b": "y"}, {"b": "x"}]}, True),  # arrays of objects
        ({"a": ["x"]}, {"a": ["w", "x"]}, True),
        ({"a": [None]}, {"a": None}, True),
        ({"a": [True]}, {"a": True}, True),
        ({"a": [True]}, {"a": 1}, False),
        ({"a": [1]}, {"a": True}, False),
        ({"a": {"b": [{"exists": False}]}}, {}, True),
        ({"a": [{"numeric": [">", 1, "<", 3]}]}, {"a": 2}, True),
        ({"a": ["x"]}, ["not", "an", "object"], False),
    ],
)
def test_body_policies(policy: dict[str, Any], body: Any, expected: bool) -> None:
    check_policy(json.dumps(policy), "MessageBody")
    assert matches_body(policy, body) is expected


@pytest.mark.parametrize(
    ("policy", "scope", "says"),
    [
        ("[1]", "MessageAttributes", "JSON object"),
        # SNS's own words
        ('{"k": "a"}', "MessageAttributes", '"k" must be an object or an array'),
        ('{"k": []}', "MessageAttributes", "Empty arrays are not allowed"),
        ('{"k": {"j": ["a"]}}', "MessageAttributes", "MessageAttributes does not support nested"),
        ('{"k": {"suffix": "a"}}', "MessageAttributes", '"suffix" must be an object or an'),
        ('{"k": [["a"]]}', "MessageAttributes", "Match value must be String, number"),
        ('{"k": [{"nope": 1}]}', "MessageAttributes", "Unrecognized match type nope"),
        ('{"k": [{"prefix": "a", "suffix": "b"}]}', "MessageAttributes", "Only one key"),
        ('{"k": [{"suffix": 1}]}', "MessageAttributes", "suffix match pattern must be a str"),
        ('{"k": [{"anything-but": {"suffix": "a"}}]}', "MessageAttributes", "Unsupported any"),
        ('{"k": [{"numeric": []}]}', "MessageAttributes", "Invalid member in numeric match: ]"),
        ('{"k": [{"numeric": ["~", 1]}]}', "MessageAttributes", "Unrecognized numeric range"),
        ('{"k": [{"numeric": ["=", "1"]}]}', "MessageAttributes", "Value of equals must be n"),
        ('{"k": [{"numeric": [">", "1"]}]}', "MessageAttributes", "Value of > must be numeric"),
        ('{"k": [{"numeric": ["<", 5, ">", 1]}]}', "MessageAttributes", "Too many elements"),
        ('{"k": [{"numeric": [">", 1, ">", 2]}]}', "MessageAttributes", "Bad numeric range op"),
        ('{"k": [{"numeric": [">", 3, "<", 1]}]}', "MessageAttributes", "Bottom must be less"),
        ('{"k": [{"numeric": [">", 1, 3]}]}', "MessageAttributes", "Bad value in numeric range"),
        ('{"k": [{"numeric": [">", 1, "<", 3, 4]}]}', "MessageAttributes", "Too many terms"),
        ('{"k": [{"exists": "yes"}]}', "MessageAttributes", "either true or false"),
        ('{"k": [{"cidr": "nope"}]}', "MessageAttributes", "Malformed CIDR, one '/' required"),
        ('{"k": [{"cidr": "x.1/8"}]}', "MessageAttributes", "Nonstandard IP address: x.1"),
        ('{"k": [{"cidr": "10.0.0.0/x"}]}', "MessageAttributes", "mask bits must be an int"),
        ('{"$or": [{"k": ["a"]}]}', "MessageAttributes", "at least two"),
        (json.dumps({f"k{i}": ["a"] for i in range(6)}), "MessageAttributes", "5 keys"),
        (
            json.dumps({f"k{i}": list(range(6)) for i in range(4)}),
            "MessageAttributes",
            "too complex",
        ),
    ],
)
def test_bad_policies_say_what_is_wrong(policy: str, scope: str, says: str) -> None:
    with pytest.raises(PolicyError, match=says) as exc:
        check_policy(policy, scope)
    assert exc.value.code == "InvalidParameter"


def test_a_dotted_body_key_names_the_path_and_the_key() -> None:
    policy = {"object.nested": ["string.value"]}
    check_policy(json.dumps(policy), "MessageBody")
    assert matches_body(policy, {"object": {"nested": "string.value"}})
    assert matches_body(policy, {"object.nested": "string.value"})
    assert matches_body(policy, {"object": [{"nested": "x"}, {"nested": "string.value"}]})
    assert not matches_body(policy, {"object": {"nested": "test-auto"}})
    assert not matches_body(policy, {"other": {"nested": "string.value"}})


def test_arrays_within_arrays_are_read_flat_as_sns_reads_them() -> None:
    policy = {"Records": {"s3": {"object": {"key": [{"prefix": "auto-"}]}}}}
    nested = {"Records": [{"s3": {"object": [[{"key": "auto-1.xml"}]]}}]}
    assert matches_body(policy, nested)
    assert not matches_body(policy, {"Records": [{"s3": {"object": [[{"key": "home.xml"}]]}}]})
    assert matches_body({"n": [{"numeric": [">", 5]}]}, {"n": [[1], [2, [9]]]})
    assert not matches_body({"n": [{"numeric": [">", 5]}]}, {"n": [[1], [2, [3]]]})


def test_a_dotted_key_may_lead_to_a_nested_condition() -> None:
    policy = {"detail": {"payload.nested.deep": {"inside": [{"prefix": "q-"}]}}}
    deep = [{"other": 1}, {"inside": "q-test"}]
    assert matches_body(policy, {"detail": {"payload": {"nested": {"deep": deep}}}})
    assert matches_body(policy, {"detail": {"payload.nested": {"deep": {"inside": "q-1"}}}})
    assert not matches_body(policy, {"detail": {"payload": {"nested": {"deep": deep[:1]}}}})


def test_nested_keys_count_their_depth_toward_the_combinations() -> None:
    # SNS's example: 3 x 4 x 2 x 3 x 1 x 3 = 216 combinations, over the limit of 150
    nested = {
        "key_a": {"key_b": {"key_c": ["1", "2", "3", "4"]}},
        "key_d": {"key_e": ["1", "2", "3"]},
        "key_f": ["1", "2", "3"],
    }
    with pytest.raises(PolicyError, match="too complex"):
        check_policy(json.dumps(nested), "MessageBody")
    del nested["key_f"]  # 72: within it
    check_policy(json.dumps(nested), "MessageBody")
    # only parent keys count toward the 5 keys: 6 leaves under 2 parents are fine
    parents = {"p": {f"a{i}": ["x"] for i in range(3)}, "q": {f"b{i}": ["y"] for i in range(3)}}
    check_policy(json.dumps(parents), "MessageBody")
    with pytest.raises(PolicyError, match="more than 5 keys"):
        check_policy(json.dumps({f"k{i}": {"n": ["x"]} for i in range(6)}), "MessageBody")
