"""Signatures of SNS messages, as SNS makes them: the canonical text of a notification or a
(un)subscription confirmation, signed with RSA (PKCS #1 v1.5) over SHA-1 (`SignatureVersion`
1) or SHA-256 (2), the certificate served at the message's `SigningCertURL`.

The key pair and its self-signed certificate are made on first use and kept in the store
(the settings of the reserved topic `conveyor-internal-sns`), so every server of one store
signs with the same key; `--sns-signing-key` and `--sns-signing-cert` give one instead.
"""

from __future__ import annotations

import base64
import datetime as dt
import threading
from collections.abc import Mapping
from typing import Any

from ...client import Client
from ...exceptions import TopicDoesNotExist
from ...validation import INTERNAL_TOPICS

INTERNAL_TOPIC = INTERNAL_TOPICS + "sns"
"""A topic of the store's own: its settings keep the signing key (never listed)."""
CERT_PATH = "/SimpleNotificationService-conveyor.pem"
"""Where the server serves its signing certificate (a message's SigningCertURL)."""

NOTIFICATION_FIELDS = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
CONFIRMATION_FIELDS = (
    "Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type",
)  # fmt: skip


def canonical(message: Mapping[str, Any]) -> bytes:
    """The text SNS signs: each field's name and value on lines of their own, in this
    order, for the fields the message has (Subject only where there is one)."""
    names = NOTIFICATION_FIELDS if message.get("Type") == "Notification" else CONFIRMATION_FIELDS
    return "".join(f"{k}\n{message[k]}\n" for k in names if k in message).encode()


class Signer:
    """Signs messages with the store's key (made on first use) or one given."""

    def __init__(self, client: Client, key_pem: bytes | None = None, cert_pem: bytes | None = None):
        self.client = client
        self._lock = threading.Lock()
        self._key: Any = None
        self.cert_pem = b""
        self.given = key_pem is not None
        if key_pem is not None and cert_pem is not None:
            self._load(key_pem, cert_pem)

    def _load(self, key_pem: bytes, cert_pem: bytes) -> None:
        from cryptography.hazmat.primitives import serialization

        self._key = serialization.load_pem_private_key(key_pem, password=None)
        self.cert_pem = cert_pem

    def certificate(self) -> bytes:
        self._ready()
        return self.cert_pem

    def _ready(self) -> None:
        with self._lock:
            if self._key is not None:
                return
            try:
                settings = self.client.topic_settings(INTERNAL_TOPIC)
            except TopicDoesNotExist:
                self.client.create_topic(INTERNAL_TOPIC)
                settings = {}
            if "signing-key" not in settings:
                key, cert = _new_key_pair()
                self.client.update_topic_settings(
                    INTERNAL_TOPIC, {"signing-key": key.decode(), "signing-cert": cert.decode()}
                )
                settings = self.client.topic_settings(INTERNAL_TOPIC)  # another's, if it won
            self._load(settings["signing-key"].encode(), settings["signing-cert"].encode())

    def sign(self, message: dict[str, Any], version: str, base_url: str) -> dict[str, Any]:
        """`message` with `SignatureVersion`, `Signature` and `SigningCertURL` added."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        self._ready()
        digest = hashes.SHA256() if version == "2" else hashes.SHA1()  # SNS's version 1 is SHA-1
        signature = self._key.sign(canonical(message), padding.PKCS1v15(), digest)
        message["SignatureVersion"] = "2" if version == "2" else "1"
        message["Signature"] = base64.b64encode(signature).decode()
        message["SigningCertURL"] = base_url + CERT_PATH
        return message


def verify(message: Mapping[str, Any], cert_pem: bytes) -> bool:
    """Whether `message`'s signature is the certificate's key's (SNS's check, as any
    receiver does it)."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    key: Any = x509.load_pem_x509_certificate(cert_pem).public_key()
    digest = hashes.SHA256() if message.get("SignatureVersion") == "2" else hashes.SHA1()
    try:
        key.verify(
            base64.b64decode(message["Signature"]), canonical(message), padding.PKCS1v15(), digest
        )
    except (InvalidSignature, KeyError, ValueError):
        return False
    return True


def _new_key_pair() -> tuple[bytes, bytes]:
    """An RSA key (2048 bits) and a self-signed certificate for it, valid ten years."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "conveyor-sns")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)
