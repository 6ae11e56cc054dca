"""Every input a release depends on, with its privacy status: ``privacy.json``'s ``inputs`` list.

A guarantee covers the whole bundle, and it holds only under what was assumed about each input. The
list states it, one entry per input, in four statuses (plus the mechanism's own randomness):

- ``private``: protected by the guarantee (the training records), or, for a held-out test split,
  private and not read by the release at all;
- ``public by construction``: computed from public values only (a random initialisation, network
  weights θ and augmentation draws from the public run seed);
- ``declared public by the user``: assumed public as the user said (the number of classes and image
  shape, public class sizes, a test split, an auxiliary file); the guarantee does not cover them;
- ``released under DP``: the output of an accounted mechanism, with the phase whose ε it spent
  (``privacy.json`` adds that phase's ε alone as ``epsilon_alone``).

Pure: plain values in, plain dicts out.
"""

from __future__ import annotations

from typing import Any

PRIVATE = "private"
BY_CONSTRUCTION = "public by construction"
DECLARED_PUBLIC = "declared public by the user"
RELEASED = "released under DP"
SECRET = "secret"
STATUSES = (PRIVATE, BY_CONSTRUCTION, DECLARED_PUBLIC, RELEASED, SECRET)


def _entry(
    name: str, status: str, detail: str, *, phase: str | None = None, **extra: Any
) -> dict[str, Any]:
    if status not in STATUSES:
        raise ValueError(f"unknown input status {status!r}")
    return {
        "input": name,
        "status": status,
        "detail": detail,
        **({"phase": phase} if phase else {}),
        **extra,
    }


def release_inputs(
    *,
    dataset: str,
    private: bool,
    class_sizes_released: bool,
    init: str,
    network: bool,
    auxiliary: tuple[str, str] | None,
    test_split: str,
    reproducible_noise: bool,
    auxiliary_phase: str = "auxiliary",
    count_phase: str = "class_counts",
) -> list[dict[str, Any]]:
    """The inputs of one release.

    ``auxiliary`` is ``(method.aux.source, description)`` of an auxiliary set, or None;
    ``test_split`` is ``"held out"`` (split off the private data), ``"declared public"`` or
    ``"none"``; ``init`` is ``method.init`` (noise, real or aux); ``network`` says whether the
    method uses random networks and augmentation (all but LDPDC)."""
    source = auxiliary[0] if auxiliary is not None else None
    inputs = [
        _records(dataset, private=private),
        _class_sizes(class_sizes_released, test_split=test_split, count_phase=count_phase),
        _entry(
            "number of classes, class names and image shape",
            DECLARED_PUBLIC,
            "the shape of the output; public by assumption for every data set",
        ),
    ]
    if auxiliary is not None:
        status = RELEASED if source == "dp" else DECLARED_PUBLIC
        phase = auxiliary_phase if source == "dp" else None
        inputs.append(_entry("auxiliary image set", status, auxiliary[1], phase=phase))
    inputs.append(_initialisation(init, auxiliary_source=source))
    inputs += _randomness(network=network, private=private, reproducible_noise=reproducible_noise)
    inputs += _test_split(test_split, read=source == "public_split")
    return inputs


def _records(dataset: str, *, private: bool) -> dict[str, Any]:
    records = (
        "read only by the mechanism: Poisson-sampled, clipped, summed and noised"
        if private
        else "read WITHOUT protection: this method is not differentially private"
    )
    phase = "main" if private else None
    return _entry(f"training records of {dataset}", PRIVATE, records, phase=phase)


def _class_sizes(released: bool, *, test_split: str, count_phase: str) -> dict[str, Any]:
    if released:
        return _entry(
            "class sizes",
            RELEASED,
            "the Gaussian mechanism on the class histogram (sensitivity 1); the sample rates and "
            "every normaliser come from the released sizes",
            phase=count_phase,
        )
    sizes = (
        "they set the sample rates q_c = L / N_c (privacy.class_sizes=public, the assumption of "
        "Zheng & Li's DPDC)"
    )
    if test_split == "held out":  # data/loaders/own.py: each record's side of the split is its own
        sizes += (
            "; with a split held out of the private data, N_c is (1 - dataset.test_fraction) x the "
            "class size of the file, never the exact number of training records"
        )
    return _entry("class sizes", DECLARED_PUBLIC, sizes)


def _initialisation(init: str, *, auxiliary_source: str | None) -> dict[str, Any]:
    initial = {
        "noise": (BY_CONSTRUCTION, "N(0, I) images from the public run seed"),
        "real": (PRIVATE, "real training images, copied into the output unprotected"),
        "aux": (
            RELEASED if auxiliary_source == "dp" else DECLARED_PUBLIC,
            "images of the auxiliary set",
        ),
    }[init]
    return _entry("synthetic initialisation", *initial)


def _randomness(*, network: bool, private: bool, reproducible_noise: bool) -> list[dict[str, Any]]:
    """Network weights and augmentation draws (public), then the mechanism's own randomness."""
    entries = []
    if network:
        entries.append(
            _entry(
                "network weights and augmentation draws",
                BY_CONSTRUCTION,
                "fresh random initialisations and DSA parameters from the public run seed, never "
                "trained on private data",
            )
        )
    if private:
        entries.append(
            _entry(
                "Poisson samples and Gaussian noise",
                BY_CONSTRUCTION if reproducible_noise else SECRET,
                "derived from the run seed in config.yaml: the release is NOT private"
                if reproducible_noise
                else "keyed by a 256-bit secret from OS entropy, never written "
                "to the bundle and deleted when the run ends",
            )
        )
    return entries


def _test_split(test_split: str, *, read: bool) -> list[dict[str, Any]]:
    if test_split == "held out":
        detail = (
            "held out from the private data; not read by the release; accuracy measured on it is "
            "NOT covered by the guarantee"
        )
        return [_entry("test split", PRIVATE, detail, read_by_release=False)]
    if test_split == "declared public":
        detail = "the data set's test split (dataset.test_root for your own data)" + (
            ": read as the auxiliary set" if read else "; not read by the release"
        )
        return [_entry("test split", DECLARED_PUBLIC, detail, read_by_release=read)]
    return []
