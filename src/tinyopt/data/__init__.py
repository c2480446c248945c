"""Data sets and batching, as in ``torch.utils.data`` (also importable as ``tinyopt.utils.data``):
``Dataset``, ``TensorDataset``, ``Subset``, ``ConcatDataset``, ``random_split``,
``IterableDataset``, ``ChainDataset``; the samplers (``DistributedSampler``: each rank's share);
``DataLoader`` (Tensor batches sharing the collated arrays, seeded shuffling, worker processes,
resumable position); plus the
bundled ``fashion_mnist()`` data set."""
from tinyopt.data.collate import default_collate, default_convert
from tinyopt.data.dataloader import DataLoader
from tinyopt.data.dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, Subset,
                                  TensorDataset, random_split)
from tinyopt.data.distributed import DistributedSampler
from tinyopt.data.fashion_mnist import fashion_mnist
from tinyopt.data.sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                                  SubsetRandomSampler, WeightedRandomSampler)
from tinyopt.data.worker import WorkerInfo, get_worker_info

__all__ = ["BatchSampler", "ChainDataset", "ConcatDataset", "DataLoader", "Dataset",
           "DistributedSampler", "IterableDataset", "RandomSampler", "Sampler",
           "SequentialSampler", "Subset", "SubsetRandomSampler", "TensorDataset",
           "WeightedRandomSampler", "WorkerInfo", "default_collate", "default_convert",
           "fashion_mnist", "get_worker_info", "random_split"]
