"""The smallest whole private run the tests and the exit-time benchmark start as users do: NDPDC on
the toy set (4 classes of 28x28), 2 images per class, 2 iterations, a tiny ConvNet; each step's real
features are clipped, summed and noised, so the run makes whole private steps. Torch-free, so a
benchmark can import it before choosing what to run."""

TINY_NDPDC = [
    "method=ndpdc",
    "dataset=toy",
    "model.width=8",
    "model.depth=2",
    "method.ipc=2",
    "method.iterations=2",
    "method.group_size=4",
    "trainer.enable_progress_bar=false",
]
# A tiny evaluation of such a run: an MLP, 2 epochs, 1 run.
TINY_EVAL = ["eval.epochs=2", "eval.runs=1", "model=mlp"]
