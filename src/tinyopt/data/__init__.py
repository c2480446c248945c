"""Data sets and batching, as in ``torch.utils.data``: ``Dataset``, ``TensorDataset``, ``Subset``,
``random_split``, ``DataLoader`` (numpy batches, seeded shuffling, resumable position) and
``DistributedSampler`` (each rank's share), plus the bundled ``fashion_mnist()`` data set."""
from tinyopt.data.dataloader import DataLoader, default_collate
from tinyopt.data.distributed import DistributedSampler
from tinyopt.data.dataset import ConcatDataset, Dataset, Subset, TensorDataset, random_split
from tinyopt.data.fashion_mnist import fashion_mnist

__all__ = ["ConcatDataset", "DataLoader", "Dataset", "DistributedSampler", "Subset",
           "TensorDataset", "default_collate", "fashion_mnist", "random_split"]
