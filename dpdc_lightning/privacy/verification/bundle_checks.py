"""The checks of ``dpdc-privacy verify`` on the bundle's bytes: synthetic.pt holds exactly what
privacy.json declares, every file in the folder is sealed in manifest.json (or owner-only), and,
with the owner's key, manifest.sig signs the release.

synthetic.pt must hold exactly two tensors, ``images`` in the dtype privacy.json declares
(``bundle.images_dtype``: float32, or uint8 for 8-bit pixel levels) and the shape it declares, and
``labels`` (int64, one per image): a third tensor, another dtype (float64 has room for other data
in its low bits, which a float32 digest would not see) or a tensor subclass is refused on read, by
verify and by every reader (:func:`read_tensors`, engine/bundle.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.receipts.digests import tensors_digest
from dpdc_lightning.privacy.receipts.manifest import files_problems, read_manifest, release_digest
from dpdc_lightning.privacy.receipts.run_files import BUNDLE_TENSORS, MANIFEST_FILE
from dpdc_lightning.privacy.receipts.signature import signature_problem
from dpdc_lightning.privacy.verification.receipt import Check
from dpdc_lightning.tensor_files import load_plain

IMAGE_DTYPES = ("float32", "uint8")
LABEL_DTYPE = "int64"


def declared(report: dict[str, Any]) -> dict[str, Any]:
    bundle = report.get("bundle")
    if not isinstance(bundle, dict):
        raise UserError("privacy.json has no bundle section")
    return bundle


def read_tensors(run_dir: Path, report: dict[str, Any]):
    """(images, labels) of synthetic.pt, exactly as privacy.json declares them; else UserError."""
    import torch

    bundle = declared(report)
    payload = load_plain(Path(run_dir) / BUNDLE_TENSORS, what="bundle tensors")
    if not isinstance(payload, dict) or sorted(payload) != ["images", "labels"]:
        keys = sorted(map(str, payload)) if isinstance(payload, dict) else type(payload).__name__
        raise UserError(f"{BUNDLE_TENSORS} must hold exactly 'images' and 'labels', holds {keys}")
    images, labels = payload["images"], payload["labels"]
    if not all(type(t) is torch.Tensor for t in (images, labels)):
        raise UserError(f"{BUNDLE_TENSORS}: 'images' and 'labels' must be plain tensors")
    dtype = bundle.get("images_dtype", "float32")
    if dtype not in IMAGE_DTYPES or str(images.dtype) != f"torch.{dtype}":
        raise UserError(
            f"{BUNDLE_TENSORS}: images are {str(images.dtype)[6:]}, privacy.json declares "
            f"{dtype!r} (one of {', '.join(IMAGE_DTYPES)})"
        )
    if str(labels.dtype) != f"torch.{LABEL_DTYPE}" or labels.dim() != 1:
        raise UserError(f"{BUNDLE_TENSORS}: labels must be one {LABEL_DTYPE} per image")
    if list(images.shape) != bundle.get("images_shape") or len(labels) != len(images):
        raise UserError(
            f"{BUNDLE_TENSORS}: images {list(images.shape)} and {len(labels)} labels, privacy.json "
            f"declares {bundle.get('images_shape')}"
        )
    return images, labels


def tensors_check(run_dir: Path, report: dict[str, Any]) -> Check:
    name = BUNDLE_TENSORS
    try:
        images, labels = read_tensors(run_dir, report)
    except UserError as err:
        return Check(name, False, str(err))
    digest, recorded = tensors_digest(images, labels), declared(report).get("sha256")
    if digest != recorded:
        return Check(
            name, False, f"sha256 {digest[:16]}… but privacy.json records {str(recorded)[:16]}…"
        )
    return Check(name, True, f"{images.dtype} images; sha256 {digest[:16]}… = bundle.sha256")


def files_check(run_dir: Path) -> tuple[Check, dict[str, Any] | None]:
    """Every file of the folder against manifest.json; the manifest, if readable."""
    name = "files"
    try:
        manifest = read_manifest(run_dir)
    except UserError as err:
        return Check(name, False, str(err)), None
    problems, owner = files_problems(run_dir, manifest)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return Check(name, False, problems[0] + more), manifest
    sealed = len(manifest["release"]) + len(manifest["readers"])
    note = f"; owner-only, not released: {', '.join(owner[:3])}" if owner else ""
    if len(owner) > 3:
        note += f" (+{len(owner) - 3} more)"
    return Check(name, True, f"{sealed} files = their sha256 in {MANIFEST_FILE}{note}"), manifest


def signature_check(run_dir: Path, manifest: dict[str, Any] | None, key: bytes) -> Check:
    name = "signature"
    if manifest is None:
        return Check(name, False, f"no readable {MANIFEST_FILE} to check the signature of")
    digest = release_digest(manifest)
    problem = signature_problem(run_dir, key, digest)
    if problem is not None:
        return Check(name, False, problem)
    return Check(name, True, f"the key's HMAC-SHA256 of the release digest {digest[:16]}…")
