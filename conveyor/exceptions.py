"""Every error Conveyor raises, under one root.

Each class carries the SQS error ``code`` and the HTTP ``status`` a server answers with, so
any way in (SDK, CLI, HTTP server, gateway) renders an error from its class alone. Driver
errors are translated at the store boundary with ``raise ... from exc``.

::

    ConveyorError
    ├── InvalidInput                  (400, bad names, sizes, ranges, batches)
    │   ├── InvalidName
    │   ├── InvalidAttribute
    │   ├── MessageTooLong
    │   ├── InvalidMessageContents
    │   └── BatchError
    │       ├── EmptyBatch
    │       ├── TooManyEntries
    │       ├── BatchEntryIdsNotDistinct
    │       └── BatchRequestTooLong
    │   (and the request errors of the ways in: InvalidAttributeName, MissingParameter,
    │    MalformedRequest, UnknownAction, RequestTooLarge)
    ├── ReceiptHandleInvalid          (404 in REST, 400 in the SQS API)
    ├── MessageNotInflight
    ├── NotFound
    │   ├── QueueDoesNotExist
    │   ├── TopicDoesNotExist
    │   └── MessageNotFound
    ├── QueueExists
    ├── TopicExists
    ├── InvalidState                  (an edit that the message's state forbids)
    ├── Unsupported                   (a store lacks a capability)
    ├── AccessDenied                  (403: unsigned, unknown key, bad signature; 401 REST)
    ├── StoreUnavailable              (the store cannot be reached; retry later)
    │   └── OutcomeUnknown            (a write's connection was lost: it may have happened)
    ├── SnsError                      (the SNS API's own codes: InvalidParameter, NotFound, ...)
    └── PushRefused                   (the push gateway answered reject or error)
"""

from __future__ import annotations


class ConveyorError(Exception):
    """Root of every Conveyor error."""

    code: str = "InternalError"
    status: int = 500
    sender_fault: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(ConveyorError):
    """The request is malformed; the message says what to fix."""

    code = "InvalidParameterValue"
    status = 400
    sender_fault = True


class InvalidName(InvalidInput):
    code = "InvalidParameterValue"


class InvalidAttribute(InvalidInput):
    code = "InvalidAttributeValue"


class MessageTooLong(InvalidInput):
    code = "InvalidParameterValue"


class InvalidMessageContents(InvalidInput):
    code = "InvalidMessageContents"


class BatchError(InvalidInput):
    """The batch as a whole is unacceptable (entries are not looked at)."""


class EmptyBatch(BatchError):
    code = "AWS.SimpleQueueService.EmptyBatchRequest"


class TooManyEntries(BatchError):
    code = "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"


class BatchEntryIdsNotDistinct(BatchError):
    code = "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"


class InvalidBatchEntryId(BatchError):
    code = "AWS.SimpleQueueService.InvalidBatchEntryId"


class BatchRequestTooLong(BatchError):
    code = "AWS.SimpleQueueService.BatchRequestTooLong"


class ReceiptHandleInvalid(ConveyorError):
    """The receipt is forged, malformed or superseded by a later receive."""

    code = "ReceiptHandleIsInvalid"
    status = 400
    sender_fault = True


class MalformedReceipt(ReceiptHandleInvalid):
    """A receipt handle that no receive could have returned."""


class MessageNotInflight(ConveyorError):
    code = "AWS.SimpleQueueService.MessageNotInflight"
    status = 400
    sender_fault = True


class NotFound(ConveyorError):
    code = "ResourceNotFoundException"
    status = 404
    sender_fault = True


class QueueDoesNotExist(NotFound):
    code = "AWS.SimpleQueueService.NonExistentQueue"
    status = 400


class TopicDoesNotExist(NotFound):
    code = "NotFound"


class MessageNotFound(NotFound):
    code = "MessageNotFound"


class QueueExists(ConveyorError):
    """A queue of that name exists with different attributes."""

    code = "QueueAlreadyExists"
    status = 400
    sender_fault = True


class TopicExists(ConveyorError):
    code = "TopicAlreadyExists"
    status = 409
    sender_fault = True


class InvalidState(ConveyorError):
    """The message's state forbids the edit (for example redriving one that is in flight)."""

    code = "InvalidStateTransition"
    status = 409
    sender_fault = True


class Unsupported(ConveyorError):
    """The store cannot do this; its ``capabilities`` say so."""

    code = "UnsupportedOperation"
    status = 400
    sender_fault = True


class InvalidAttributeName(InvalidInput):
    code = "InvalidAttributeName"


class MissingParameter(InvalidInput):
    code = "MissingParameter"


class MalformedRequest(InvalidInput):
    """The request body or query string cannot be parsed."""

    code = "MalformedQueryString"


class UnknownAction(InvalidInput):
    code = "InvalidAction"


class UnknownOperation(InvalidInput):
    """A request to a queue URL that names no action (SQS answers 404)."""

    code = "UnknownOperationException"
    status = 404


class RequestTooLarge(InvalidInput):
    code = "RequestEntityTooLarge"
    status = 413


class AccessDenied(ConveyorError):
    """The request is not signed or authorised as this server requires."""

    code = "AccessDenied"
    status = 403
    sender_fault = True


class OverLimit(ConveyorError):
    """A request past one of SQS's per-request limits (actions in a permission, ...)."""

    code = "OverLimit"
    status = 403
    sender_fault = True


class InvalidClientTokenId(AccessDenied):
    code = "InvalidClientTokenId"


class SignatureDoesNotMatch(AccessDenied):
    code = "SignatureDoesNotMatch"


class Unauthorized(AccessDenied):
    """A REST request without the bearer token the server requires."""

    code = "Unauthorized"
    status = 401


class StoreUnavailable(ConveyorError):
    """The store cannot be reached or failed; the operation may be retried."""

    code = "ServiceUnavailable"
    status = 503


class OutcomeUnknown(StoreUnavailable):
    """The connection to the store was lost while a write was in flight, and whether the
    store committed it cannot be known (its answer was what was lost, and what it wrote may
    have been received and deleted since). Nothing more was written; send again where the
    message must arrive, knowing it may arrive twice."""

    @classmethod
    def of_send(cls, queue: str, n: int) -> OutcomeUnknown:
        return cls(
            f"the connection to the store was lost while a send of {n}"
            f" message{'s' if n != 1 else ''} to {queue} was in flight: it may have been"
            " stored (and received since), or not; send again if it must arrive, knowing"
            " that it may then arrive twice"
        )

    @classmethod
    def of_publish(cls, topic: str) -> OutcomeUnknown:
        return cls(
            f"the connection to the store was lost while a publish to topic {topic} was in"
            " flight: its copies may have been stored (and received since), or not; publish"
            " again if it must arrive, knowing that it may then arrive twice"
        )


class StagedWritesLost(StoreUnavailable):
    """A job's publish found less in the store than its tasks staged (a database restart
    empties an unlogged staging table; a stage left a day is taken for a dead job's and
    cleared). Nothing was published: run the job again."""


class SnsError(ConveyorError):
    """An error of the SNS API, with SNS's own code and status (its codes are not SQS's:
    `InvalidParameter`, `NotFound`, `AuthorizationError`, ...)."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.sender_fault = status < 500


class PushRefused(ConveyorError):
    """The push gateway answered `reject` or `error`; `answer` says which."""

    code = "PushRefused"

    def __init__(self, answer: str, text: str) -> None:
        super().__init__(f"gateway answered {answer}: {text}")
        self.answer = answer
        self.text = text
