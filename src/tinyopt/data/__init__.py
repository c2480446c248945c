"""Data sets and batching, as in ``torch.utils.data``: ``Dataset``, ``TensorDataset``, ``Subset``,
``random_split`` and ``DataLoader`` (numpy batches, seeded shuffling, resumable position)."""
from tinyopt.data.dataloader import DataLoader, default_collate
from tinyopt.data.dataset import ConcatDataset, Dataset, Subset, TensorDataset, random_split

__all__ = ["ConcatDataset", "DataLoader", "Dataset", "Subset", "TensorDataset", "default_collate",
           "random_split"]
