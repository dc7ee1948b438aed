"""Python client of the actonce sidecar: every write of an agent's run lands once.

with Client("127.0.0.1:50051") as client:
    attempt = client.begin("run-42", "triage", checkpoint="cp-7")
    ticket = attempt.create("ticket", {"title": "Disk full"})
    attempt.end()
"""

from actonce_client.client import (
    DEFAULT_TIMEOUT,
    Artifact,
    Attempt,
    Client,
    Counts,
    Effect,
    Message,
    Outcome,
    RawJSON,
    Step,
    Write,
    new_request_id,
)
from actonce_client.errors import (
    ActonceError,
    FailureClass,
    FieldViolation,
    InvalidInput,
    InvalidSetting,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "ActonceError",
    "Artifact",
    "Attempt",
    "Client",
    "Counts",
    "Effect",
    "FailureClass",
    "FieldViolation",
    "InvalidInput",
    "InvalidSetting",
    "Message",
    "Outcome",
    "RawJSON",
    "Step",
    "Write",
    "new_request_id",
]
