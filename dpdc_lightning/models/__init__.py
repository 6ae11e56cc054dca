"""Networks of the dataset-condensation benchmark, built from explicit generators."""

from dpdc_lightning.models.convnet import ConvNet
from dpdc_lightning.models.init import init_weights_
from dpdc_lightning.models.registry import NETWORKS, NetworkSpec, build_network

__all__ = ["NETWORKS", "ConvNet", "NetworkSpec", "build_network", "init_weights_"]
