"""A run's logged scalars (ε and the loss per step), read back from its TensorBoard event files.

Why the event files and not a CSV of our own: every run already writes them (engine/tensorboard.py),
they are in the release ledger field by field (``loss@*`` released by the condensation,
``epsilon@*`` by the plan), a resumed run appends a new file that continues the same steps, and a
second copy of the same numbers would be one more file to keep equal to the first. TensorBoard's own
reader (``EventFileLoader``) parses them; wall times are never read. The loss is logged with
``batch_size=1`` (engine/method_module.py), so no realised sample size is averaged into it.
"""

from __future__ import annotations

from pathlib import Path

from dpdc_lightning.privacy.receipts.run_files import TENSORBOARD_DIR

TAGS = ("epsilon", "loss")


def _started(path: Path) -> tuple[int, str]:
    """Event files are named ``events.out.tfevents.<start time>.<host>.<pid>.<n>``: the later
    process (a resume) comes last, and its values replace an earlier file's at the same step."""
    parts = path.name.split(".")
    return (int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else 0, path.name)


def scalars(run_dir: Path, tags: tuple[str, ...] = TAGS) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} of the run's condensation logs (missing tags are absent)."""
    folder = Path(run_dir) / TENSORBOARD_DIR
    files = sorted(folder.glob("events.out.tfevents.*"), key=_started) if folder.is_dir() else []
    if not files:
        return {}
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    found: dict[str, dict[int, float]] = {}
    for path in files:
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag not in tags:
                    continue
                if value.HasField("tensor"):
                    number = float(make_ndarray(value.tensor).reshape(-1)[0])
                else:
                    number = float(value.simple_value)
                found.setdefault(value.tag, {})[int(event.step)] = number
    return {tag: dict(sorted(values.items())) for tag, values in found.items()}
