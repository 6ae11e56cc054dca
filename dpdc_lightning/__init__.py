"""dpdc_lightning: differentially private dataset condensation on PyTorch Lightning."""

__version__ = "0.1.0"
