"""The SNS wire API: topics and subscriptions (api.py), attributes, filter policies,
publication to subscribed queues, webhooks (http/https subscriptions), outboxes, pending
confirmations and message signing."""
