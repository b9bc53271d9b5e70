"""The actions of the SQS API over a `Client`, on JSON-shaped parameters and results.

Each action validates its parameters (read and checked by `params`) and answers SQS's
error codes. They are answered by concept: `queues` (queues, attributes, tags,
permissions), `messages` (send, receive, delete, visibility) and `move` (message move
tasks), each reaching a queue through `reach.Reach`; store calls run in the thread pool
or inline (`conveyor.aio`), and long polls wait in the event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from ...aio import AsyncClient, Offload, offload, offload_write
from ...client import Client
from ...exceptions import UnknownAction
from ..metrics import Metrics
from .messages import MessageActions
from .move import MoveTasks
from .names import Caller, Namespaces
from .params import Params, Result
from .policy import check_access
from .queues import QueueActions
from .reach import Reach

Action = Callable[[Params, Caller], Awaitable[Result]]


class SqsApi:
    """Answers SQS actions: each by the part that holds its concept."""

    def __init__(
        self,
        client: Client,
        *,
        namespaces: Namespaces | None = None,
        metrics: Metrics | None = None,
        draining: Callable[[], bool] = lambda: False,
        aio: AsyncClient | None = None,
    ) -> None:
        self.client = client
        self.ns = namespaces or Namespaces()
        self.metrics = metrics or Metrics(client)
        self.moves = MoveTasks(client, self.ns)
        reach = Reach(client, self.ns)
        aio = aio or AsyncClient(client=client)
        q = self.queues = QueueActions(client, self.ns, reach)
        m = self.messages = MessageActions(client, aio, reach, self.metrics, draining)
        self._actions: dict[str, Action] = {
            "ReceiveMessage": m.receive_message,
            "StartMessageMoveTask": self._start_move,
            "CancelMessageMoveTask": self._cancel_move,
            "ListMessageMoveTasks": self._list_moves,
        }
        for name, fn in {
            "CreateQueue": q.create_queue,
            "DeleteQueue": q.delete_queue,
            "ListQueues": q.list_queues,
            "GetQueueUrl": q.get_queue_url,
            "GetQueueAttributes": q.get_queue_attributes,
            "SetQueueAttributes": q.set_queue_attributes,
            "PurgeQueue": q.purge_queue,
            "TagQueue": q.tag_queue,
            "UntagQueue": q.untag_queue,
            "ListQueueTags": q.list_queue_tags,
            "ListDeadLetterSourceQueues": q.list_dead_letter_source_queues,
            "AddPermission": q.add_permission,
            "RemovePermission": q.remove_permission,
        }.items():
            self._actions[name] = self._offloaded(fn, offload)
        for name, fn in {
            "SendMessage": m.send_message,
            "SendMessageBatch": m.send_message_batch,
            "DeleteMessage": m.delete_message,
            "DeleteMessageBatch": m.delete_message_batch,
            "ChangeMessageVisibility": m.change_message_visibility,
            "ChangeMessageVisibilityBatch": m.change_message_visibility_batch,
        }.items():
            self._actions[name] = self._offloaded(fn, offload_write)
        self._names = frozenset(self._actions)

    def _offloaded(self, fn: Callable[[Params, Caller], Result], how: Offload) -> Action:
        backend = self.client.backend

        async def run(params: Params, caller: Caller) -> Result:
            result: Result = await how(backend, fn, params, caller)
            return result

        return run

    @property
    def actions(self) -> frozenset[str]:
        return self._names

    async def call(self, action: str, params: Params, caller: Caller) -> Result:
        fn = self._actions.get(action)
        if fn is None:
            raise UnknownAction(f"The action {action} is not valid for this endpoint.")
        if caller.action != action:
            caller = dataclasses.replace(caller, action=action)
        return await fn(params, caller)

    # -- message move tasks ---------------------------------------------------------------

    async def _start_move(self, params: Params, caller: Caller) -> Result:
        self._own_arns(params, caller)
        return await self.moves.start(params)

    async def _cancel_move(self, params: Params, caller: Caller) -> Result:
        self._own_arns({"SourceArn": self.moves.source_arn(params)}, caller)
        return self.moves.cancel(params)

    async def _list_moves(self, params: Params, caller: Caller) -> Result:
        self._own_arns(params, caller)
        return self.moves.list_tasks(params)

    def _own_arns(self, params: Params, caller: Caller) -> None:
        """Move tasks are their queues' owner's: a verified caller names its own queues."""
        for key in ("SourceArn", "DestinationArn"):
            arn = params.get(key)
            if caller.verified and isinstance(arn, str) and arn:
                name = self.ns.from_arn(arn, key)
                if self.ns.split(name)[1] != caller.account:
                    check_access(None, account=caller.account, action=caller.action, arn=arn)
