"""``dpdc-privacy`` (``python -m dpdc_lightning.cli.privacy``): the privacy calculator of
cli/privacy_calculator.py, and the two verbs that read a run folder:

    verify RUN [--key FILE]   every check of engine/verification.py: the files against
                              manifest.json, the receipt against plan.json, plan.json against
                              config.yaml, every ε recomputed; with --key, the owner's
                              signature. Exit 0 verified, 1 a check failed, 2 bad input
    sign RUN --key FILE       the owner signs a verified release: manifest.sig, an HMAC-SHA256 of
                              the manifest's release digest with the key in FILE (kept outside RUN)

They live here, not in privacy/, because re-deriving the plan from config.yaml takes the method's
own schedule (methods/, above privacy/ in the layering).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from dpdc_lightning.errors import UserError, main_entry

VERBS = ("verify", "sign")
USAGE = "usage: dpdc-privacy verify RUN [--key FILE] | dpdc-privacy sign RUN --key FILE"


def privacy_main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in VERBS:
        from dpdc_lightning.cli.privacy_calculator import main

        return main(argv)
    try:
        run_dir, key_file = _arguments(argv)
        if argv[0] == "verify":
            return _verify(run_dir, key_file)
        return _sign(run_dir, key_file)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _arguments(argv: list[str]) -> tuple[Path, str | None]:
    rest, key = argv[1:], None
    if "--key" in rest:
        at = rest.index("--key")
        if at + 1 >= len(rest):
            raise UserError(f"--key needs a file; {USAGE}")
        key, rest = rest[at + 1], rest[:at] + rest[at + 2 :]
    if len(rest) != 1 or rest[0].startswith("-"):
        raise UserError(USAGE)
    if argv[0] == "sign" and key is None:
        raise UserError(f"sign needs the owner's key: --key FILE; {USAGE}")
    return Path(rest[0]), key


def _verify(run_dir: Path, key_file: str | None) -> int:
    from dpdc_lightning.engine.verification import verify_bundle
    from dpdc_lightning.privacy.receipts.signature import read_key
    from dpdc_lightning.privacy.verification.verdict import format_verdict

    key = None if key_file is None else read_key(key_file)
    verdict = verify_bundle(run_dir, key=key)
    lines = format_verdict(verdict).splitlines()
    if verdict.ok and key is None:  # before the verdict, which stays the last line
        lines.insert(
            -1,
            "note: unsigned: the files belong together; whoever could write the folder could "
            "have made them so (--key checks the owner's signature; docs/privacy.md)",
        )
    print("\n".join(lines))
    return 0 if verdict.ok else 1


def _sign(run_dir: Path, key_file: str) -> int:
    from dpdc_lightning.engine.bundle import atomic_write_text
    from dpdc_lightning.engine.verification import refusal, verify_bundle
    from dpdc_lightning.privacy.receipts.manifest import read_manifest, release_digest
    from dpdc_lightning.privacy.receipts.run_files import SIGNATURE_FILE
    from dpdc_lightning.privacy.receipts.signature import read_key, signature_text

    key = read_key(key_file, run_dir=run_dir)
    verdict = verify_bundle(run_dir)
    if not verdict.ok:
        raise UserError(refusal(verdict))
    digest = release_digest(read_manifest(run_dir))
    atomic_write_text(run_dir / SIGNATURE_FILE, signature_text(key, digest))
    print(f"signed {run_dir}: {SIGNATURE_FILE} holds the HMAC-SHA256 of release {digest[:16]}…")
    return 0


if __name__ == "__main__":
    main_entry(privacy_main)
