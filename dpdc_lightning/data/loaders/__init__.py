"""The loaders behind ``dataset=NAME``: one module per kind of source, each returning an
``ImageData``.

embedded.py (digits, toy), idx.py (mnist, fashion_mnist), torchvision_sets.py (cifar10, celeba),
imagefolder.py and tensors.py (your own data; own.py holds their shared test split). A built-in
loader is called as ``loader(root, download, cache)``; the own-data readers take ``root`` and their
``dataset.*`` options. data/registry.py names them; data/load.py resolves, checks and caches a call.
"""
