"""The loaders behind ``dataset=NAME``: one module per kind of source, each returning an
``ImageData``.

embedded.py (digits, toy), idx.py (mnist, fashion_mnist), torchvision_sets.py (cifar10, celeba),
imagefolder.py and tensors.py (your own data; own.py holds their shared test split). Every loader
is called alike, ``load_<name>(request) -> ImageData`` (protocol.py); data/registry.py names them;
data/load.py resolves, checks and caches a call.
"""
