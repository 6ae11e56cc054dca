"""The owner's optional signature of a release: HMAC-SHA256 (RFC 2104, Python's ``hmac``) over the
manifest's release digest (privacy/receipts/manifest.py), with a key the owner keeps in a file of
their own.

``dpdc-privacy sign RUN --key FILE`` writes manifest.sig; ``dpdc-privacy verify RUN --key FILE``
recomputes it. An HMAC is a shared-key signature: whoever holds the key can sign, so the owner
gives it only to recipients they trust not to forge (docs/privacy.md says what each mode proves).
The key never enters the run folder: signing refuses a key file inside it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.receipts.run_files import SIGNATURE_FILE

ALGORITHM = "hmac-sha256"
MIN_KEY_BYTES = 32  # 256 bits, as the run's own secret (privacy/mechanisms/secret.py)


def read_key(path: str | Path, *, run_dir: Path | None = None) -> bytes:
    """The key's bytes (the file as it is); too short, unreadable or inside ``run_dir``: refused."""
    key_path = Path(path)
    if run_dir is not None and key_path.resolve().is_relative_to(Path(run_dir).resolve()):
        raise UserError(f"--key {path} lies inside the run folder: the key never goes with it")
    try:
        key = key_path.read_bytes()
    except OSError as err:
        raise UserError(f"--key {path}: {err.strerror or err}") from None
    if len(key) < MIN_KEY_BYTES:
        raise UserError(
            f"--key {path} holds {len(key)} bytes; a key needs at least {MIN_KEY_BYTES} random "
            f"bytes (e.g. head -c {MIN_KEY_BYTES} /dev/urandom > FILE)"
        )
    return key


def mac(key: bytes, digest: str) -> str:
    return hmac.new(key, f"dpdc_lightning/release/v1/{digest}".encode(), hashlib.sha256).hexdigest()


def signature_text(key: bytes, digest: str) -> str:
    document = {"algorithm": ALGORITHM, "release_sha256": digest, "mac": mac(key, digest)}
    return json.dumps(document, indent=2) + "\n"


def signature_problem(run_dir: Path, key: bytes, digest: str) -> str | None:
    """None if manifest.sig is the key's HMAC of ``digest``, else what is wrong."""
    path = Path(run_dir) / SIGNATURE_FILE
    if not path.is_file():
        return f"no {SIGNATURE_FILE}: the owner never signed this release (dpdc-privacy sign)"
    try:
        document: Any = json.loads(path.read_text())
        recorded = document["mac"] if document.get("algorithm") == ALGORITHM else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        recorded = None
    if not isinstance(recorded, str):
        return f"{SIGNATURE_FILE} is not an {ALGORITHM} signature"
    if not hmac.compare_digest(recorded, mac(key, digest)):
        return (
            f"{SIGNATURE_FILE} is not this key's signature of the release as it is now (another "
            "key, or a file changed and was resealed since the owner signed)"
        )
    return None
