"""The HTTP front: the protocol (uvicorn's httptools protocol with the fast paths), the
endpoint that routes the SQS and SNS wire APIs, authentication (SigV4 and bearer tokens),
trusted proxies and connection counts."""
