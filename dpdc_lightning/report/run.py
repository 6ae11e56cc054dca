"""``report.html`` of one run: the release explained on one page, for a reader who was not there.

What the page shows comes from the released files, once they verify (engine/verification.py):
the images drawn again from synthetic.pt's verified tensors (never synthetic.png's bytes, which a
forger could replace), privacy.json, plan.json, config.yaml and the sealed TensorBoard log of the
run's ε and loss, which the release ledger (privacy/receipts/ledger.py) counts as released: the loss
is computed against the noisy release only. Evaluations and audits, when present, are added in
sections marked as NOT covered by the guarantee wherever they read private records (a held-out
test split; every audit). Nothing varies between two renderings of the same files: no date, no
wall time, no path, not even the run folder's name (the page must not change when the folder is
renamed or moved).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.receipts.run_files import CONFIG_FILE, GRID_IMAGE, PRIVACY_REPORT
from dpdc_lightning.report import extras
from dpdc_lightning.report.events import scalars
from dpdc_lightning.report.guarantee import coverage, delta, eps_cell, guarantee
from dpdc_lightning.report.html import (
    box,
    facts,
    image,
    page,
    section,
    sourced,
    text,
)


def verdict(run_dir: Path) -> tuple[Any, str]:
    """(the verdict, its last line) of ``dpdc-privacy verify`` on the bundle in ``run_dir``."""
    from dpdc_lightning.engine.verification import verify_bundle
    from dpdc_lightning.privacy.verification.verdict import format_verdict

    found = verify_bundle(run_dir)
    return found, format_verdict(found).splitlines()[-1]


def _course(run_dir: Path, privacy: dict[str, Any]) -> str:
    from dpdc_lightning.plots.curves import against_steps_png

    logged = scalars(run_dir)
    parts = []
    epsilon = logged.get("epsilon")
    if epsilon:
        reference = (
            ("accounted ε", privacy["epsilon"]) if privacy.get("epsilon") is not None else None
        )
        png = against_steps_png(
            list(epsilon),
            list(epsilon.values()),
            ylabel="ε spent",
            title="ε against steps",
            reference=reference,
        )
        parts.append(
            image(png, alt="ε spent against the condensation step", source="tensorboard:epsilon")
        )
    loss = logged.get("loss")
    if loss:
        png = against_steps_png(
            list(loss), list(loss.values()), ylabel="loss", title="loss against steps", index=1
        )
        parts.append(
            image(png, alt="the condensation loss against the step", source="tensorboard:loss")
        )
    if not parts:
        return "<p>No TensorBoard log of ε or the loss in this run folder.</p>"
    return (
        "<p>From the run's TensorBoard log. ε is the accountant's after each step; the loss is "
        "the method's matching loss against the noisy release (logged once per step, never "
        "averaged over a realised sample size).</p>" + "".join(parts)
    )


def _images(run_dir: Path, bundle: dict[str, Any], found: Any) -> str:
    """The grid drawn from the verified tensors (engine/image_grid.py, as synthetic.png was)."""
    names = ", ".join(map(str, bundle.get("class_names") or []))
    if found.ok:
        from dpdc_lightning.engine.image_grid import grid_png
        from dpdc_lightning.privacy.verification.bundle_checks import read_tensors

        images, labels = read_tensors(run_dir, found.report)
        shown = image(
            grid_png(images.float(), labels, class_names=bundle.get("class_names")),
            alt="the synthetic images, one row per class",
            source=GRID_IMAGE,
            caption=text(f"{bundle.get('images_shape')} images; classes: {names}"),
        )
    else:
        shown = "<p>Not shown: the bundle fails verification (see below).</p>"
    digest = sourced(bundle.get("sha256", ""), "privacy.json:bundle.sha256")
    return shown + facts([("sha256 of the tensors (synthetic.pt)", digest)])


def _verification(line: str, passed: bool, epsilon: float | None) -> str:
    shown = text(line)
    if epsilon is not None:  # ε as privacy.json states it (the ledger's field), not a new number
        stated = f"ε = {epsilon_text(epsilon)}"
        shown = shown.replace(stated, f"ε = {eps_cell(epsilon, 'privacy.json:epsilon')}")
    return box("covered" if passed else "not-covered", f"<p>{shown}</p>")


def render_run(run_dir: Path) -> str:
    """The page of the run in ``run_dir`` (its privacy.json must exist)."""
    run_dir = Path(run_dir)
    privacy = json.loads((run_dir / PRIVACY_REPORT).read_text())
    config = (run_dir / CONFIG_FILE).read_text() if (run_dir / CONFIG_FILE).is_file() else ""
    private = privacy.get("epsilon") is not None
    found, line = verdict(run_dir)
    title = f"Release report: {privacy.get('method')} on {_dataset(config)}"
    header = (
        f"<h1>{text(title)}</h1><p>{text(privacy.get('method'))} on "
        f"{text(_dataset(config))}; ε = {eps_cell(privacy.get('epsilon'), 'privacy.json:epsilon')}"
        + (f", δ = {delta(privacy)}" if private else "")
        + "</p>"
    )
    sections = [
        section(
            "images", "The synthetic images", _images(run_dir, privacy.get("bundle", {}), found)
        ),
        *_selection(privacy),
        section("guarantee", "The privacy guarantee", guarantee(privacy)),
        section("verify", "Verification", _verification(line, found.ok, privacy.get("epsilon"))),
        section("coverage", "What the guarantee covers", coverage(privacy)),
        section("course", "The run", _course(run_dir, privacy)),
        *extras.sections(run_dir),
        section("config", "Configuration (config.yaml)", f"<pre>{text(config)}</pre>"),
    ]
    version = privacy.get("versions", {}).get("dpdc_lightning", "")
    footer = (
        f"<p>Written by dpdc_lightning {text(version)} from the files beside it: synthetic.pt, "
        "privacy.json, plan.json, config.yaml and the TensorBoard log.</p>"
    )
    return page(title, header=header, sections=sections, footer=footer)


def _selection(privacy: dict[str, Any]) -> list[str]:
    """The private selection that chose this release, when one did."""
    if "selection" not in privacy:
        return []
    from dpdc_lightning.report.selection import selection_html

    return [section("selection", "Chosen by a private selection", selection_html(privacy))]


def _dataset(config: str) -> str:
    """The dataset's name in config.yaml."""
    import yaml

    tree = yaml.safe_load(config) if config else None
    name = tree.get("dataset", {}).get("name") if isinstance(tree, dict) else None
    return str(name) if name else "an unnamed dataset"
