"""The rows and scales of ``benchmarks/faithfulness/reproduce.py``: every method of the package at three sizes.

A row is a condensation (package config tokens) plus the facts the table prints about it. The
``paper`` scale is built from the experiment presets (``dpdc_lightning/conf/experiment``), which
hold each paper's protocol; ``digits`` and ``cpu`` are reduced protocols sized for a 2-core CPU,
and their tables say so.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    key: str
    method: str  # its name in published.py (dm, ldpdc, ndpdc, dc, psg, psg_generator, dosser, dosser_pea, dp_merf)
    label: str
    setting: str  # what this row runs, in words (steps, batch, noise)
    tokens: tuple[str, ...]  # config overrides, before dataset/seed/run_dir
    target_epsilon: float | None  # the ε the row is meant to have (None: not private)
    step_s: float  # estimated seconds per condensation step on a 2-core CPU (dry-run estimate only)
    steps: int  # condensation steps (private + free), for the estimate
    eval_pea: bool = False  # evaluate on the PEA expansion (Dosser + PEA)


@dataclass(frozen=True)
class Scale:
    name: str
    dataset: str  # default dataset
    eval_epochs: int
    eval_runs: int
    eval_fixed_s: float  # per evaluation run: setup + testing on the real test split (estimate)
    eval_epoch_s: float  # per evaluation epoch (estimate, at this IPC)
    note: str
    rows: tuple[Row, ...]
    test_size: int | None = None  # test on the first N records of the test split (None: all)


def _eps(epsilon: float) -> tuple[str, ...]:
    return (f"privacy.target_epsilon={epsilon:g}", "privacy.calibrate=sigma")


def reduced_rows(
    *,
    ipc: int,
    dm: tuple[int, int],
    group_size: int,
    ndpdc: int,
    high_eps: float,
    dc: tuple[int, int, int, int],
    psg: tuple[int, int, int, int, int],
    dosser: tuple[int, int, int, int],
    dp_merf: tuple[int, int],
    step_s: dict[str, float],
) -> tuple[Row, ...]:
    """The rows of a reduced scale. dm: (iterations, real batch); dc: (rounds, outer, inner, real
    batch); psg: (rounds R, outer T, inner J, batches K, expected batch B); dosser: (sampling,
    optimisation steps, subspace dim, iterations of the NDPDC auxiliary run); dp_merf: (free
    steps, random features). Private rows run at ε = 1 and at ``high_eps``."""
    m = f"method.ipc={ipc}"
    rounds, outer, inner, batch = dc
    r, t, j, k, b = psg
    psg_tokens = (
        "method=psg",
        m,
        f"method.iterations={r}",
        f"method.outer_loop={t}",
        f"method.inner_loop={j}",
        f"method.batches={k}",
        f"method.batch_size={b}",
        *_eps(1.0),
    )
    psg_setting = f"R {r}, T {t}, J {j}, K {k}: {r * t * k} private steps, Poisson B {b} (paper B 256, R 200), C 0.1"
    sampling, optimisation, dim, aux_iterations = dosser
    ndpdc_every = f"method.checkpoint_every={max(10, ndpdc // 10)}"
    return (
        Row(
            "dm",
            "dm",
            "DM",
            f"{dm[0]} iterations, real batch {dm[1]}/class, N(0, 1) init",
            (
                "method=dm",
                m,
                f"method.iterations={dm[0]}",
                f"method.batch_real={dm[1]}",
                "method.init=noise",
            ),
            None,
            step_s["dm"],
            dm[0],
        ),
        *(
            Row(
                f"ldpdc_eps{eps:g}".replace(".", "_"),
                "ldpdc",
                "LDPDC",
                f"M = IPC = {ipc} steps, L {group_size}, σ calibrated",
                ("method=ldpdc", m, f"method.group_size={group_size}", *_eps(eps)),
                eps,
                0.1,
                ipc,
            )
            for eps in (1.0, high_eps)
        ),
        *(
            Row(
                f"ndpdc_eps{eps:g}".replace(".", "_"),
                "ndpdc",
                "NDPDC",
                f"{ndpdc} iterations, L {group_size}, G 1, σ calibrated",
                (
                    "method=ndpdc",
                    m,
                    f"method.group_size={group_size}",
                    f"method.iterations={ndpdc}",
                    ndpdc_every,
                    *_eps(eps),
                ),
                eps,
                step_s["ndpdc"],
                ndpdc,
            )
            for eps in (1.0, high_eps)
        ),
        Row(
            "dc",
            "dc",
            "DC/DSA",
            f"{rounds} round(s) x (outer {outer}, inner {inner}), real batch {batch}/class "
            "(reference 1000 rounds of (10, 50), batch 256)",
            (
                "method=dc",
                m,
                f"method.iterations={rounds}",
                f"method.outer_loop={outer}",
                f"method.inner_loop={inner}",
                f"method.batch_real={batch}",
            ),
            None,
            step_s["dc"],
            rounds * outer,
        ),
        Row("psg", "psg", "PSG", psg_setting, psg_tokens, 1.0, step_s["psg"], r * t * k),
        Row(
            "psg_generator",
            "psg_generator",
            "PSG + generator prior",
            psg_setting,
            (*psg_tokens, "method.prior=generator"),
            1.0,
            step_s["psg"],
            r * t * k,
        ),
        Row(
            "dosser",
            "dosser",
            "Dosser (DOS + SER)",
            f"{sampling} sampling + {optimisation} optimisation steps, "
            f"L {group_size}, SER d {dim} from an NDPDC auxiliary set ({aux_iterations} iterations, ε 0.2 of the "
            "total), no PEA",
            (
                "method=dosser",
                m,
                f"method.group_size={group_size}",
                f"method.sampling_steps={sampling}",
                f"method.optimisation_steps={optimisation}",
                f"method.subspace_dim={dim}",
                "method.aux.source=dp",
                f"method.aux.iterations={aux_iterations}",
                f"method.checkpoint_every={max(10, optimisation // 5)}",
                "privacy.target_epsilon=1",
            ),
            1.0,
            step_s["dosser"],
            sampling + optimisation,
        ),
        _dp_merf_row(m, iterations=dp_merf[0], features=dp_merf[1], step_s=step_s["dp_merf"]),
    )


def _dp_merf_row(ipc_token: str, *, iterations: int, features: int, step_s: float) -> Row:
    """The DP-MERF plug-in (examples/dp_merf, installed by ``make``): one release of the classes'
    mean random-feature embeddings at ε 1, then free Adam steps on the pixels. DPDC's Table 1 ran
    the DP-MERF authors' generator instead (50 samples a class): the table says so beside it."""
    return Row(
        "dp_merf_eps1",
        "dp_merf",
        "DP-MERF (pixels)",
        f"one release (q = 1) of {features} random features' class means, σ calibrated, then "
        f"{iterations} free Adam steps on the pixels (DPDC Table 1 ran the authors' generator)",
        (
            "method=dp_merf",
            ipc_token,
            f"method.iterations={iterations}",
            f"method.features={features}",
            *_eps(1.0),
        ),
        1.0,
        step_s,
        1 + iterations,
    )


# CPU s an iteration of DM at the paper's setting, 1 thread (results/speed/dm_vs_reference_speed_cpu.md
# measured 5.7 to 7.9 on a shared 2-core AVX-512 EPYC)
DM_PAPER_STEP_S = 6.5


def paper_rows() -> tuple[Row, ...]:
    """The papers' protocols, from the experiment presets (their files cite the papers)."""
    psg = ("experiment=psg_eps1",)
    return (
        Row(
            "dm",
            "dm",
            "DM",
            "DPDC Table 1: IPC 50, 20000 iterations, real batch 256, random (N(0, 1)) init",
            ("experiment=dm_paper", "method.init=noise"),
            None,
            DM_PAPER_STEP_S,
            20000,
        ),
        # The same with fewer iterations: the count a CPU session affords (20000 take ~36 h). Its
        # published cell names the paper's count instead of a gap (published.py ``iterations``).
        # A checkpoint every 250 iterations lets a killed condensation go on (on the same machine).
        Row(
            "dm_i1000",
            "dm",
            "DM",
            "IPC 50, 1000 of DPDC Table 1's 20000 iterations, real batch 256, N(0, 1) init",
            (
                "experiment=dm_paper",
                "method.init=noise",
                "method.iterations=1000",
                "method.checkpoint_every=250",
            ),
            None,
            DM_PAPER_STEP_S,
            1000,
        ),
        Row(
            "ldpdc",
            "ldpdc",
            "LDPDC",
            "IPC 50, L 50, σ = √d (noise multiplier 1)",
            ("experiment=ldpdc_paper",),
            1.06,
            0.1,
            50,
        ),
        Row(
            "ldpdc_eps1",
            "ldpdc",
            "LDPDC",
            "IPC 50, L 50, σ calibrated to ε 1",
            ("experiment=ldpdc_eps1",),
            1.0,
            0.1,
            50,
        ),
        Row(
            "ndpdc",
            "ndpdc",
            "NDPDC",
            "IPC 50, L 50, G 1, σ 1, 10000 iterations",
            ("experiment=ndpdc_paper",),
            5.45,
            2.5,
            10000,
        ),
        # DPDC Table 6 (iterations ablation): the main table's setting with fewer iterations, the
        # NDPDC rows a CPU can finish (ε 2.3618 and 3.3294 on FashionMNIST, our accountant).
        *(
            Row(
                f"ndpdc_i{iterations}",
                "ndpdc",
                "NDPDC",
                f"IPC 50, L 50, G 1, σ 1, {iterations} iterations (DPDC Table 6)",
                ("experiment=ndpdc_paper", f"method.iterations={iterations}"),
                epsilon,
                2.5,
                iterations,
            )
            for iterations, epsilon in ((2000, 2.36), (4000, 3.33))
        ),
        Row(
            "ndpdc_eps1",
            "ndpdc",
            "NDPDC",
            "IPC 50, L 50, G 1, 10000 iterations, σ calibrated to ε 1",
            ("experiment=ndpdc_eps1",),
            1.0,
            2.5,
            10000,
        ),
        Row(
            "dc",
            "dc",
            "DC/DSA",
            "IPC 10, 1000 rounds x (10, 50), real batch 256",
            ("experiment=dc_paper",),
            None,
            20.0,
            10000,
        ),
        Row(
            "psg",
            "psg",
            "PSG",
            "IPC 10, R 200, K 10, B 256, C 0.1, σ calibrated to ε 1",
            psg,
            1.0,
            14.0,
            20000,
        ),
        Row(
            "psg_generator",
            "psg_generator",
            "PSG + generator prior",
            "as PSG with S = G(z, y), Adam 0.01, and "
            "the authors' prior loops T 2, J 10 (main_prior.py): R 200 x T 2 x K 10 private steps",
            (*psg, "method.prior=generator"),
            1.0,
            14.0,
            4000,
        ),
        Row(
            "dosser",
            "dosser_pea",
            "Dosser + PEA",
            "IPC 50, I1 10000, I2 200000, SER d 500 (DP aux, ε 0.2), PEA",
            ("experiment=dosser_paper",),
            1.0,
            0.5,
            210000,
            eval_pea=True,
        ),
        # DPDC Table 1's DP-MERF column at its IPC 50 and ε 1; features and steps are the plug-in's
        # defaults (chosen on the digits, benchmarks/results/utility/dp_merf_tuning_digits_cpu.md).
        _dp_merf_row("method.ipc=50", iterations=1000, features=10000, step_s=0.2),
    )


# Step and evaluation costs below are rough, from runs on the development machine (2-core AMD EPYC,
# AVX2, load average 4-6 from other jobs, OMP_NUM_THREADS=1) through the package API: e.g. on
# FashionMNIST 20 NDPDC iterations (L 50, IPC 10) took 99 s and 20 DM iterations 267 s, one evaluation
# run of 10 / 40 epochs on 100 images 114 / 217 s with the full test split. They feed only
# --dry-run's estimate.
SCALES = {
    s.name: s
    for s in (
        Scale(
            "tiny",
            "digits",
            eval_epochs=2,
            eval_runs=1,
            eval_fixed_s=3.0,
            eval_epoch_s=0.05,
            note="a smoke test of the pipeline on the embedded digits (a few minutes); the numbers mean nothing",
            rows=reduced_rows(
                ipc=2,
                dm=(5, 8),
                group_size=5,
                ndpdc=5,
                high_eps=5.45,
                dc=(1, 1, 1, 8),
                psg=(1, 1, 1, 1, 32),
                dosser=(5, 5, 8, 5),
                dp_merf=(5, 64),
                step_s={
                    "dm": 0.1,
                    "ndpdc": 0.1,
                    "dc": 1.0,
                    "psg": 1.0,
                    "dosser": 0.2,
                    "dp_merf": 0.1,
                },
            ),
        ),
        Scale(
            "digits",
            "digits",
            eval_epochs=300,
            eval_runs=3,
            eval_fixed_s=3.0,
            eval_epoch_s=0.15,
            note="the embedded 16x16 digits (~144 records per class, so q = L/144 is large and ε per step high); "
            "minutes per row on a 2-core CPU",
            rows=reduced_rows(
                ipc=10,
                dm=(300, 32),
                group_size=5,
                ndpdc=300,
                high_eps=5.45,
                dc=(2, 10, 50, 64),
                psg=(1, 10, 50, 2, 256),
                dosser=(100, 300, 100, 200),
                dp_merf=(1000, 10000),
                step_s={
                    "dm": 0.2,
                    "ndpdc": 0.3,
                    "dc": 15.0,
                    "psg": 4.0,
                    "dosser": 0.5,
                    "dp_merf": 0.05,
                },
            ),
        ),
        Scale(
            "cpu",
            "fashion_mnist",
            eval_epochs=30,
            eval_runs=2,
            eval_fixed_s=15.0,
            eval_epoch_s=3.4,
            test_size=2000,
            note="FashionMNIST reduced for a shared 2-core CPU: IPC 10 (DPDC's tables: 50), 100 iterations (paper "
            "10000), PSG with B 32 and 10 private steps (paper B 256, 20000), evaluation 30 epochs x 2 runs "
            "(paper 1000 x 5) tested on the first 2000 of the 10000 test images",
            rows=reduced_rows(
                ipc=10,
                dm=(100, 50),
                group_size=50,
                ndpdc=100,
                high_eps=5.45,
                dc=(1, 5, 10, 32),
                psg=(1, 10, 10, 1, 32),
                dosser=(50, 150, 100, 50),
                dp_merf=(1000, 10000),
                step_s={
                    "dm": 8.0,
                    "ndpdc": 5.0,
                    "dc": 20.0,
                    "psg": 15.0,
                    "dosser": 3.0,
                    "dp_merf": 0.1,
                },
            ),
        ),
        Scale(
            "paper",
            "fashion_mnist",
            eval_epochs=1000,
            eval_runs=5,
            eval_fixed_s=30.0,
            eval_epoch_s=2.0,
            note="the papers' protocols (GPU: many hours per row on a CPU)",
            rows=paper_rows(),
        ),
    )
}
