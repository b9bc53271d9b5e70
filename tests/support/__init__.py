"""What the tests share: live servers, database servers made for a test, fault proxies,
the history checker, waiting helpers."""
