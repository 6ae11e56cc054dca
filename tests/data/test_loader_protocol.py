"""Every loader behind ``dataset=NAME`` follows one protocol (data/loaders/protocol.py):
``loader(request: LoadRequest) -> ImageData``, built in or registered with ``register_loader``;
``register_dataset``'s older ``loader(root)`` still works, with a DeprecationWarning."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest
import torch

from dpdc_lightning.data import ImageData, clear_dataset_cache, load_dataset
from dpdc_lightning.data.loaders.protocol import Loader, LoadRequest
from dpdc_lightning.data.registry import (
    _REGISTERED,
    BUILTIN,
    DATASETS,
    register_dataset,
    register_loader,
)
from dpdc_lightning.errors import UserError


@pytest.fixture
def registry():
    """The registry and the load cache as they were before the test, whatever it registered (a
    leaked registration once broke a later test of the same worker)."""
    before = dict(_REGISTERED)
    clear_dataset_cache()
    yield
    _REGISTERED.clear()
    _REGISTERED.update(before)
    clear_dataset_cache()


def _toy(name: str, n: int = 12) -> ImageData:
    images = torch.linspace(-1, 1, n * 4 * 4).reshape(n, 1, 4, 4)
    labels = torch.arange(n) % 2
    return ImageData.from_tensors(
        images, labels, test_images=images[:4], test_labels=labels[:4], name=name
    )


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_every_built_in_loader_has_the_one_signature(name):
    loader = DATASETS[name]
    assert isinstance(loader, Loader)
    (parameter,) = inspect.signature(loader).parameters.values()
    hints = typing.get_type_hints(loader)
    assert parameter.name == "request" and hints["request"] is LoadRequest, name
    assert hints["return"] is ImageData, name


def test_a_built_in_loader_called_directly_gives_what_load_dataset_gives(registry):
    direct = DATASETS["toy"](LoadRequest("toy", cache_dir=Path("unused")))
    assert torch.equal(direct.train_images, load_dataset("toy").train_images)


def test_own_data_without_a_root_is_refused_by_the_loader_too():
    with pytest.raises(UserError, match="dataset=tensors reads your own data"):
        DATASETS["tensors"](LoadRequest("tensors"))


def test_a_registered_loader_is_called_with_the_request(registry, tmp_path):
    seen: list[LoadRequest] = []

    def mine(request: LoadRequest) -> ImageData:
        seen.append(request)
        return _toy("mine")

    register_loader("mine", mine)
    assert "mine" in DATASETS and DATASETS["mine"] is mine
    data = load_dataset("mine", root=tmp_path / "x" / ".." / "data", cache_dir=tmp_path / "c")
    assert data.name == "mine" and len(data.train_labels) == 12
    (request,) = seen
    assert request == LoadRequest(
        "mine", root=tmp_path / "data", download=False, cache_dir=tmp_path / "c", options={}
    )
    with pytest.raises(UserError, match=r"'mine' is already registered \(loader .*mine\)"):
        register_loader("mine", mine)
    with pytest.raises(UserError, match="built in"):
        register_loader("tensors", mine)


def test_a_loader_returning_something_else_is_refused(registry):
    register_loader("broken", lambda request: {"images": None})
    with pytest.raises(UserError, match="the loader of dataset 'broken' returned dict"):
        load_dataset("broken")


def test_register_dataset_still_works_and_warns(registry, tmp_path):
    """The older plug-in form, ``loader(root)``: handed dataset.root, with a DeprecationWarning."""
    roots: list[Path | None] = []

    def old(root):
        roots.append(root)
        return _toy("old")

    with pytest.warns(DeprecationWarning, match="use register_loader"):
        register_dataset("old", old)
    assert load_dataset("old", root=tmp_path).name == "old" and roots == [tmp_path]
    with pytest.warns(DeprecationWarning), pytest.raises(UserError, match=r"loader .*old\)"):
        register_dataset("old", old)


def test_the_documented_loader_runs(registry):
    """docs/adding_a_method.md's stripes loader, as the page shows it, registered and loaded."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "adding_a_method.md").read_text()
    (code,) = [
        block
        for block in page.split("```python\n")[1:]
        if block.startswith("# dpdc_lightning/data/loaders/stripes.py")
    ]
    namespace: dict = {}
    exec(code.split("```")[0], namespace)
    register_loader("stripes", namespace["load_stripes"])
    data = load_dataset("stripes")
    assert tuple(data.train_images.shape) == (40, 1, 8, 8) and data.num_classes == 2
    assert float(data.train_images.min()) == -1.0 and float(data.train_images.max()) == 1.0


def test_the_registry_is_restored(registry):
    """The fixture's own check: nothing registered above is left behind."""
    assert not {"mine", "broken", "old", "stripes"} & set(_REGISTERED)
