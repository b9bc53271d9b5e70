"""The SQS wire API: its actions (api.py), their parameters and attributes, the JSON and
Query wire formats, queue names and URLs, queue policies and message moves."""
