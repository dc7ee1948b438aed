"""Operator keys: a SQLite ledger's decisions signed by a key the serving sidecar never holds.

A SQLite ledger has no roles: whatever may append to the file (the sidecar that serves it)
could append a decision too. So on SQLite an operator's decision carries an HMAC-SHA256
made with an operator key, a file only the operators hold (``audit resolve --operator-key
FILE``, the console's ``--operator-key``), over the event's canonical content and the place
it takes in the chain (its number and the hash it links to), so that no signature can be
copied onto another decision nor replayed later. The event names the key by its id (a
fingerprint: the key itself is never written), and ``by`` is that id unless the console
signed its operator in.

``audit verify`` reports a decision no operator made: an unsigned decision after the
ledger's first signed one (decisions recorded before operators had keys are listed, not
failed: see docs/upgrading.md), and, given the key, a signature that is not that key's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path

from sidecar.ledger.base import AuditEvent, LedgerError, Phase, StoredEvent

# What a decision's detail records: the key's id, and the signature.
KEY_ID = "operator_key"
SIGNATURE = "signature"

# Fewer bytes than this is no key: `openssl rand -hex 32` writes 64.
_MIN_KEY_BYTES = 32


@dataclass(frozen=True)
class OperatorKey:
    """An operator's key, as read from its file."""

    id: str
    secret: bytes = dataclasses.field(repr=False)

    def sign(self, event: AuditEvent, seq: int, prev_hash: str) -> AuditEvent:
        """``event``, to be appended as event ``seq`` after ``prev_hash``, signed."""
        detail = {**event.detail, KEY_ID: self.id}
        detail.pop(SIGNATURE, None)
        unsigned = dataclasses.replace(event, detail=detail)
        signature = self._mac(unsigned, seq, prev_hash)
        return dataclasses.replace(event, detail={**detail, SIGNATURE: signature})

    def verifies(self, stored: StoredEvent) -> bool:
        """Whether ``stored``'s signature is this key's, over what it holds where it is."""
        detail = dict(stored.event.detail)
        signature = str(detail.pop(SIGNATURE, ""))
        unsigned = dataclasses.replace(stored.event, detail=detail)
        expected = self._mac(unsigned, stored.seq, stored.prev_hash)
        return hmac.compare_digest(signature, expected)

    def _mac(self, event: AuditEvent, seq: int, prev_hash: str) -> str:
        content = {"seq": seq, "prev_hash": prev_hash, **dataclasses.asdict(event)}
        text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hmac.new(self.secret, text.encode("utf-8"), hashlib.sha256).hexdigest()


def load_key(path: Path) -> OperatorKey:
    """The key in ``path`` (its bytes, surrounding whitespace stripped); LedgerError, naming
    the file, when it cannot be read, is too short, or others may read it."""
    try:
        secret = path.read_bytes().strip()
        mode = path.stat().st_mode
    except OSError as exc:
        raise LedgerError(f"cannot read the operator key {path}: {exc.strerror}") from None
    if len(secret) < _MIN_KEY_BYTES:
        raise LedgerError(
            f"the operator key {path} holds {len(secret)} bytes, fewer than {_MIN_KEY_BYTES}: "
            "make one with `openssl rand -hex 32 > FILE`"
        )
    if os.name == "posix" and mode & 0o077:
        raise LedgerError(
            f"the operator key {path} may be read by others (mode {mode & 0o777:o}): "
            f"chmod 600 {path}"
        )
    fingerprint = hashlib.sha256(b"actonce operator key\x00" + secret).hexdigest()
    return OperatorKey(f"key-{fingerprint[:16]}", secret)


@dataclass(frozen=True)
class Signatures:
    """What ``audit verify`` found of a SQLite ledger's decisions."""

    verified: int = 0  # signed with the key given, and it verifies
    unchecked: int = 0  # signed with a key that was not given
    before_signing: int = 0  # unsigned, recorded before the ledger's first signed decision
    # (seq, why) of each decision no operator made: unsigned after the first signed one,
    # or a signature that is not the given key's.
    forged: tuple[tuple[int, str], ...] = ()


class SignatureCheck:
    """Each decision of a chain walked in order, checked against the key given (if any)."""

    def __init__(self, key: OperatorKey | None) -> None:
        self._key = key
        self._signing = False  # a signed decision was met: every later one must be signed
        self._found = Signatures()

    def take(self, stored: StoredEvent) -> None:
        if stored.event.phase != Phase.DECISION:
            return
        found = self._found
        key_id = str(stored.event.detail.get(KEY_ID, ""))
        if not key_id or SIGNATURE not in stored.event.detail:
            if self._signing:
                why = "unsigned: recorded after the ledger's decisions were signed"
                self._found = dataclasses.replace(found, forged=(*found.forged, (stored.seq, why)))
            else:
                self._found = dataclasses.replace(found, before_signing=found.before_signing + 1)
            return
        self._signing = True
        if self._key is None or key_id != self._key.id:
            self._found = dataclasses.replace(found, unchecked=found.unchecked + 1)
        elif self._key.verifies(stored):
            self._found = dataclasses.replace(found, verified=found.verified + 1)
        else:
            why = f"its signature is not that of operator key {key_id}"
            self._found = dataclasses.replace(found, forged=(*found.forged, (stored.seq, why)))

    def result(self) -> Signatures:
        return self._found
