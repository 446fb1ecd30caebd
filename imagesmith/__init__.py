"""imagesmith: GPU training images built from a driver/CUDA/PyTorch compatibility matrix, and proven."""

__version__ = "0.1.0"
