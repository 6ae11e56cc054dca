"""``make gpu-bundle``: fill ``.gpu/`` (ignored by git) with what a lent GPU machine lacks, so that
``benchmarks/gpu/gpu_check.sh`` runs there without internet.

- ``.gpu/wheels/``: the project's runtime dependencies the machine's image lacks, as cp312
  manylinux x86_64 wheels at the versions of ``constraints.txt``. Which ones: the dependency
  closure of ``pyproject.toml`` (read from the metadata of the installed package, markers evaluated
  for CPython 3.12 on x86_64 Linux, extras left out) minus the image's packages
  (``benchmarks/gpu/gpu_image.txt``); plus ``EXTRA``: an image package whose version is unknown and
  which one of our dependencies caps. Torch and its CUDA libraries are never bundled: the image's
  torch must stay. A package published only as a source archive is built into a wheel here.
- ``.gpu/data/fashion-mnist/``: FashionMNIST's four idx ``.gz`` files, from
  ``/usr/share/datasets/fashion-mnist`` if Debian's ``dataset-fashion-mnist`` is installed, else
  from that package's ``.deb`` (``apt-get download``, unpacked here; nothing is installed).
- ``.gpu/reference/``: the DPDC authors' loop and evaluator (``main_dpdc.py``, ``utils.py``,
  ``networks.py``, ``celeba_dataset.py`` (``utils`` imports it) of
  SecMLSys/Differentially-Private-Dataset-Condensation and its commit), taken from a checkout
  or bare mirror of that repository given with ``--reference-git PATH`` (``make gpu-bundle
  DPDC_REF=PATH``); none by default, never committed, never downloaded here. Without one the
  bundle says so and the GPU script's speed pair reports "reference absent"; a path given that is
  not such a checkout is an error.

Prints the size of ``.gpu/`` and of the tracked tree: together they must stay under 60 MiB (the
device tool carries at most 64 MiB). Exit code 2 with one ``error:`` line when something is missing
that the bundle cannot do without (a wheel that cannot be fetched, a tree over the limit).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / ".gpu"
IMAGE = Path(__file__).resolve().parent / "gpu_image.txt"
LIMIT_MIB = 60.0
REFERENCE_FILES = ("main_dpdc.py", "utils.py", "networks.py", "celeba_dataset.py")
FASHION = "/usr/share/datasets/fashion-mnist"
IDX = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
# Never bundled: the image's torch stack must not be replaced (its CUDA build matches the driver).
NEVER = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-.*|cuda-.*)$")
# Image packages bundled anyway: their version on the image is not known and a dependency caps it.
EXTRA = {"attrs": "dp-accounting requires attrs<24; the image's attrs is likely newer"}
TARGET = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
}
TARGET |= {"platform_machine": "x86_64", "sys_platform": "linux", "platform_system": "Linux"}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64")
PLATFORMS += ("manylinux2014_x86_64", "manylinux1_x86_64")


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def image_packages(path: Path = IMAGE) -> dict[str, str | None]:
    """The image's packages (canonical name -> version where the listing gave one)."""
    found: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            found[canonicalize_name(name)] = version or None
    return found


def closure(root: str = "dpdc_lightning") -> dict[str, list[str]]:
    """Every runtime dependency of ``root``, transitively (canonical name -> who requires it and
    how), with markers evaluated for the GPU machine's Python; from the installed metadata."""
    environment = {**default_environment(), **TARGET, "extra": ""}
    needed: dict[str, list[str]] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here (a marker-only dependency of another platform)
        for text in requirements:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            key = canonicalize_name(requirement.name)
            if key not in needed:
                todo.append(requirement.name)
            needed.setdefault(key, []).append(f"{name} {requirement.specifier or '(any)'}")
    return needed


def locked_versions(path: Path = ROOT / "constraints.txt") -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^ ;]+)", line)
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def missing_packages(needed: dict[str, list[str]], image: dict[str, str | None]) -> dict[str, str]:
    """name -> why it travels: not on the image, or on it with a version we must not rely on."""
    chosen = {}
    for name, why in sorted(needed.items()):
        if NEVER.match(name):
            continue
        if name not in image:
            chosen[name] = "not on the image (required by " + "; ".join(why) + ")"
        elif name in EXTRA:
            chosen[name] = EXTRA[name]
    return chosen


def fetch_wheels(packages: dict[str, str], pins: dict[str, str], into: Path) -> list[str]:
    into.mkdir(parents=True, exist_ok=True)
    for old in into.glob("*.whl"):
        old.unlink()
    lines = []
    for name, why in packages.items():
        spec = f"{name}=={pins[name]}" if name in pins else name
        download = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        download += ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
        download += [arg for p in PLATFORMS for arg in ("--platform", p)]
        done = subprocess.run([*download, "-d", str(into), spec], capture_output=True, text=True)
        if done.returncode != 0:  # a source archive only (antlr4-python3-runtime): build its wheel
            build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(into)]
            done = subprocess.run([*build, spec], capture_output=True, text=True)
            wheel = next(iter(sorted(into.glob(f"{name.replace('-', '_')}-*.whl"))), None)
            if done.returncode != 0 or wheel is None or not wheel.name.endswith("-none-any.whl"):
                fail(
                    f"no cp312 manylinux wheel of {spec}, and no pure wheel could be built:\n"
                    + done.stderr[-1500:]
                )
        lines.append(f"{spec}: {why}")
    return lines


def fetch_fashion_mnist(into: Path) -> str:
    into.mkdir(parents=True, exist_ok=True)
    if all((into / name).is_file() for name in IDX):
        return f"FashionMNIST: kept ({into})"
    source = Path(FASHION)
    if not all((source / name).is_file() for name in IDX):
        with tempfile.TemporaryDirectory(prefix="dpdc-gpu-bundle-") as tmp:
            done = subprocess.run(
                ["apt-get", "download", "dataset-fashion-mnist"],
                cwd=tmp,
                capture_output=True,
                text=True,
            )
            debs = list(Path(tmp).glob("dataset-fashion-mnist_*.deb"))
            if done.returncode != 0 or not debs:
                return (
                    "FashionMNIST: ABSENT (neither /usr/share/datasets/fashion-mnist nor "
                    "`apt-get download dataset-fashion-mnist` worked; run `apt-get update` first)"
                )
            subprocess.run(["dpkg-deb", "-x", str(debs[0]), tmp], check=True)
            for name in IDX:
                shutil.copy2(Path(tmp) / FASHION.lstrip("/") / name, into / name)
        return f"FashionMNIST: from the package's .deb ({debs[0].name})"
    for name in IDX:
        shutil.copy2(source / name, into / name)
    return f"FashionMNIST: copied from {source}"


def fetch_reference(git_dir: Path | None, into: Path) -> str:
    """Copy the authors' files at the checkout's HEAD into ``into`` (emptied first)."""
    shutil.rmtree(into, ignore_errors=True)
    if git_dir is None:
        return (
            "authors' DPDC code: ABSENT (no checkout given: make gpu-bundle DPDC_REF=PATH); "
            "the GPU script's speed pair will report 'reference absent'"
        )
    git_dir = git_dir.expanduser()
    if not git_dir.is_dir():
        fail(
            f"DPDC_REF / --reference-git {git_dir} is not a folder; give a checkout of the DPDC code"
        )
    git = ["git", "-C", str(git_dir)]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    if commit.returncode != 0:
        fail(f"{git_dir} is not a git checkout or mirror (git rev-parse HEAD failed)")
    into.mkdir(parents=True)
    for name in REFERENCE_FILES:
        shown = subprocess.run([*git, "show", f"HEAD:{name}"], capture_output=True)
        if shown.returncode != 0:
            shutil.rmtree(into, ignore_errors=True)
            fail(
                f"{git_dir} has no {name} at HEAD: not a checkout of "
                "SecMLSys/Differentially-Private-Dataset-Condensation"
            )
        (into / name).write_bytes(shown.stdout)
    (into / "COMMIT").write_text(commit.stdout.strip() + "\n")
    return f"authors' DPDC code: {', '.join(REFERENCE_FILES)} at {commit.stdout.strip()[:7]}"


def size_mib(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in paths if p.is_file()) / 2**20


def tree_mib() -> float:
    """What the device tool sends besides the carried folders: tracked files and untracked ones git
    does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return size_mib([ROOT / name for name in listed if name])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--reference-git",
        type=Path,
        default=None,
        metavar="PATH",
        help="a clone or bare mirror of the DPDC authors' repository (make gpu-bundle "
        "DPDC_REF=PATH); without one the bundle has no reference code",
    )
    parser.add_argument(
        "--list-only",
        action="store_true",
        help="print the packages that would travel; fetch nothing",
    )
    args = parser.parse_args(argv)
    missing = missing_packages(closure(), image_packages())
    if args.list_only:
        print("\n".join(f"{name}: {why}" for name, why in missing.items()))
        return 0
    lines = fetch_wheels(missing, locked_versions(), BUNDLE / "wheels")
    lines.append(fetch_fashion_mnist(BUNDLE / "data" / "fashion-mnist"))
    lines.append(fetch_reference(args.reference_git, BUNDLE / "reference"))
    (BUNDLE / "MANIFEST.txt").write_text("\n".join(lines) + "\n")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    (BUNDLE / "TREE_COMMIT").write_text(
        head.stdout.strip() or "unknown"
    )  # the GPU copy has no .git
    bundle, tree = size_mib(list(BUNDLE.rglob("*"))), tree_mib()
    print("\n".join(lines))
    print(
        f"size: .gpu/ {bundle:.1f} MiB + the tree {tree:.1f} MiB = {bundle + tree:.1f} MiB "
        f"(limit {LIMIT_MIB:.0f} MiB; the device tool carries at most 64)"
    )
    if bundle + tree > LIMIT_MIB:
        fail(f"the bundle and the tree take {bundle + tree:.1f} MiB, over {LIMIT_MIB:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
