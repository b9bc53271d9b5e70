"""The queue an SQS request names, where its caller may reach it (`policy.check_access`)."""

from __future__ import annotations

from ...client import Client
from .names import Caller, Namespaces
from .params import Params, require
from .policy import check_access


class Reach:
    """The queue a request names, where its caller may reach it: a caller whose signature
    was verified reaches its own account's queues, and another account's where the queue's
    Policy allows the action."""

    def __init__(self, client: Client, namespaces: Namespaces) -> None:
        self.client = client
        self.ns = namespaces

    def queue(self, params: Params, caller: Caller) -> str:
        """The stored name of the queue the request's QueueUrl names."""
        return self.reachable(self.ns.from_url(caller, require(params, "QueueUrl")), caller)

    def reachable(self, name: str, caller: Caller) -> str:
        """The queue, if a verified caller of another account is allowed by its policy."""
        if caller.verified and self.ns.split(name)[1] != caller.account:
            info = self.client.queue_info(name)
            check_access(
                info.attributes.settings.get("Policy"),
                account=caller.account,
                action=caller.action,
                arn=self.ns.arn(name),
            )
        return name
