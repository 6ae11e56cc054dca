"""Issue 41 item 4: a worst-case neighbour searched by gradient ascent through the method's own
rows (audit/neighbours/search.py), beside the probe's fixed candidates. ``leak_rescale`` of
tests/support/toy_leaks.py tips a batch-level rule only beyond every extreme-pixel record: the fixed
candidates miss it, the searched record finds it."""

from __future__ import annotations

import re
import types

import pytest
import torch
import toy_leaks

from dpdc_lightning.audit.neighbours import probe, search
from dpdc_lightning.audit.neighbours.probe import candidates, probe_rows
from dpdc_lightning.audit.neighbours.records import OwnData
from dpdc_lightning.methods.release import Records


def _sample(per_class: int = 6) -> Records:
    """A Poisson-like sample of the check's own records (the outlier's data), per class."""
    own = OwnData.make(outlier=True)
    images, generator = own.unit_rows("train"), torch.Generator().manual_seed(3)
    parts = []
    for c in range(3):
        members = torch.nonzero(own.labels == c).flatten()
        parts.append(images[members[torch.randperm(len(members), generator=generator)]][:per_class])
    return Records([0, 1, 2], parts, [torch.full((len(p),), c) for c, p in enumerate(parts)])


def _rescale_rows(threshold: float | None = None):
    """leak_rescale's release_rows as its plug-in computes them (no run needed)."""
    config = toy_leaks.LeakRescaleConfig()
    if threshold is not None:
        config.threshold = threshold
    method = types.SimpleNamespace(config=config)
    method.projection = lambda size: toy_leaks.LeakRescale.projection(method, size)
    return lambda records: toy_leaks.LeakRescale.release_rows(method, records, step=0, context=None)


def _flat(records: Records) -> list[torch.Tensor]:
    return [images.flatten(1) for images in records.images]


def test_no_record_of_the_data_nor_any_candidate_reaches_the_threshold():
    """The premise of the planted bug: rows of every record and every fixed candidate stay below
    the threshold, so neither the check's cases nor the fixed candidates tip it."""
    rows_of, sample = _rescale_rows(), _sample()
    threshold = toy_leaks.LeakRescaleConfig().threshold
    every = OwnData.make(outlier=True).unit_rows("train")
    norms = rows_of(Records([0], [every], [torch.zeros(len(every))]))[0].norm(dim=1)
    assert float(norms.max()) < 0.75 * threshold
    for record in candidates(sample.images[0][0]).values():
        assert float(rows_of(Records([0], [record[None]], [torch.zeros(1)]))[0].norm()) < threshold


def test_the_searched_record_tips_a_rule_the_fixed_candidates_miss(monkeypatch):
    rows_of, sample = _rescale_rows(), _sample()
    found = probe_rows(rows_of, sample)
    assert found and re.match(
        r"a record \(searched by gradient ascent\) added to partition 0 \(the sample, 6 records\) "
        r"changed 6 rows of partition 0",
        found[0],
    ), found
    assert not any("searched" not in line for line in found), found
    monkeypatch.setattr(
        probe, "searched_record", lambda rows_of, records, k: (records.images[k][0], 0)
    )
    assert probe_rows(rows_of, sample) == []  # the fixed candidates alone pass it


@pytest.mark.parametrize("rows", ["pixels", "features"])
def test_the_searched_record_moves_the_sums_at_least_as_much_as_every_candidate(rows):
    """On correct rows (pixels; the plug-in's features with no threshold in reach) the ascent ends
    at least where the best fixed candidate is."""
    rows_of = _flat if rows == "pixels" else _rescale_rows(threshold=1e9)
    sample = _sample()
    record, value = search.searched_record(rows_of, sample, 1)
    assert float(record.abs().max()) <= 1
    assert value == pytest.approx(float(search.sum_change(rows_of, sample, 1, record)))
    best = max(
        float(search.sum_change(rows_of, sample, 1, candidate))
        for candidate in candidates(sample.images[1][0]).values()
    )
    assert value >= best * (1 - 1e-9)


def test_rows_without_a_graph_are_searched_along_random_directions():
    """Rows computed under no_grad (most built-in methods): the simultaneous-perturbation
    estimate still climbs, from the sampled record, past where it started."""
    rows_of, sample = _rescale_rows(threshold=1e9), _sample()

    def no_graph(records: Records) -> list[torch.Tensor]:
        with torch.no_grad():
            return rows_of(records)

    start = float(search.sum_change(rows_of, sample, 0, sample.images[0][0]))
    _, value = search.searched_record(no_graph, sample, 0)
    assert value > 1.5 * start


def test_the_search_keeps_to_its_time_budget():
    rows_of, sample = _rescale_rows(), _sample()
    record, value = search.searched_record(rows_of, sample, 0, seconds=0.0)
    assert torch.equal(record, sample.images[0][0])  # no step taken: the start, its value
    assert value == pytest.approx(float(search.sum_change(rows_of, sample, 0, record)))


@pytest.mark.slow
def test_check_catches_the_rescale_only_with_the_searched_record(leaks, tmp_path):
    from dpdc_lightning.audit.neighbours import check_cases, run_case

    case = check_cases("leak_rescale")[0]
    verdict = run_case(case, tmp_path / case.folder)
    assert verdict.problems and re.match(
        r"\(p\) rows: a record \(searched by gradient ascent\) added to partition \d \(the sample",
        verdict.problems[0],
    ), verdict.problems
    assert all(line.startswith("(p) rows: a record (searched") for line in verdict.problems)
