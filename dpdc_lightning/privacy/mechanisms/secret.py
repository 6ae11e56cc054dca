"""The run's secret seed: where Poisson sampling and Gaussian noise draw their randomness.

Privacy-critical. The seed comes from OS entropy, so the noise is unknown to everyone. It is kept
in ``<run_dir>/.private_seed`` (mode 0600) while the run is unfinished, so a resumed run redraws
exactly the samples and noise of the steps it repeats: a repeated step releases nothing new, and
the resumed run's ε equals the uninterrupted run's. The file is deleted once the bundle is
written: a finished run directory holds nothing that would let anyone subtract the noise. A secret
left by a crash right after the bundle is deleted by the next command touching the run
(``export.forget_if_finished``); ``python train.py forget=RUN_DIR`` deletes an abandoned run's.
With ``privacy.reproducible_noise=true`` the public run seed is used instead (not private).

Beside it, ``<run_dir>/.data_digest`` (mode 0600) holds the keyed digest of the data the run
started on (privacy/receipts/digests.py), keyed by a key derived from the secret; a resumed run must
read the same data. It is deleted with the secret: nothing about the data stays in a finished
folder.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from dpdc_lightning.privacy.receipts.run_files import DIGEST_FILE, SECRET_FILE, mode_of

# The key of the SHAKE-256 noise stream (privacy/mechanisms/noise.py): a 63-bit key could be
# searched.
SECRET_BITS = 256


def new_secret() -> int:
    """A fresh 256-bit integer from OS entropy: the run's secret for sampling and noise."""
    return int.from_bytes(os.urandom(SECRET_BITS // 8), "little")


def derive_secret(secret: int, purpose: str) -> int:
    """A 256-bit key for one ``purpose``, derived from the run's secret by SHAKE-256 (FIPS 202).

    For a second private stage of the same run (the DP auxiliary set of Dosser's SER), whose samples
    and noise must be independent of the main stage's yet as unguessable: the main key's 256 bits,
    not the 63 of a torch seed (``seeding.derive_seed``). The purpose comes first and the secret
    last, so no two (purpose, secret) pairs encode to the same bytes."""
    if "/" in purpose:
        raise ValueError(f"a secret's purpose must not contain '/', got {purpose!r}")
    text = f"dpdc_lightning/derived-secret/v1/{purpose}/{int(secret)}".encode()
    return int.from_bytes(hashlib.shake_256(text).digest(SECRET_BITS // 8), "little")


def store_secret(run_dir: Path, seed: int) -> None:
    """Keep the run's secret next to its checkpoints, readable by the owner only."""
    path = Path(run_dir) / SECRET_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode_of(SECRET_FILE))
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{seed}\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_secret(run_dir: Path) -> int | None:
    """The stored seed, or None if the run never stored one (or already finished)."""
    path = Path(run_dir) / SECRET_FILE
    return int(path.read_text().strip()) if path.is_file() else None


def forget_secret(run_dir: Path) -> bool:
    """Delete the run's secret and its data digest; True if there was a secret."""
    path = Path(run_dir) / SECRET_FILE
    existed = path.is_file()
    path.unlink(missing_ok=True)
    (Path(run_dir) / DIGEST_FILE).unlink(missing_ok=True)
    return existed


def store_data_digest(run_dir: Path, digest: str) -> None:
    """Keep the keyed digest of the run's data beside its secret, readable by the owner only."""
    path = Path(run_dir) / DIGEST_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode_of(DIGEST_FILE))
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{digest}\n")


def read_data_digest(run_dir: Path) -> str | None:
    """The stored data digest, or None (deleted, or forgotten: a resume then is refused)."""
    path = Path(run_dir) / DIGEST_FILE
    return path.read_text().strip() if path.is_file() else None
