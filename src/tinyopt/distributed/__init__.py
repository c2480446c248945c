"""``tinyopt.distributed``: data-parallel training over MPI, with ``torch.distributed``'s names.

    # train.py, launched as:  mpiexec -n 2 python train.py
    import tinyopt as to
    import tinyopt.distributed as dist
    from tinyopt import nn, optim
    from tinyopt.data import DataLoader, DistributedSampler
    from tinyopt.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("mpi")
    model = DDP(nn.Sequential(nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10)))
    opt = optim.Adam(model.parameters(), lr=1e-3)
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=64, sampler=sampler)   # 64 samples per rank
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()   # gradients averaged over ranks
            opt.step()
    dist.destroy_process_group()

Pieces: ``process_group`` (``init_process_group``, ``get_rank``, ``all_reduce``, ...), its
guards ``fingerprint`` (every collective checked across ranks) and ``watchdog`` (timeouts, a
failing rank ends the job), ``ddp``
(``tinyopt.nn.parallel.DistributedDataParallel``), ``tinyopt.data.DistributedSampler``, and
``tinyopt.distributed.optim.ZeroRedundancyOptimizer`` (ZeRO-1: optimizer state sharded over
ranks).  The engine is MPI through mpi4py (``pip install 'tinyopt[mpi]'`` installs mpi4py and the
mpich wheel, whose ``mpiexec`` lands in the environment); importing ``tinyopt`` or this package
never imports mpi4py: only ``init_process_group`` does.  See docs/distributed.md.
"""
from tinyopt.distributed.errors import DistBackendError, DistError
from tinyopt.distributed.process_group import (INSTALL, GroupMember, ProcessGroup, ReduceOp, Work,
                                               all_gather_object, all_reduce, barrier,
                                               broadcast, broadcast_object_list,
                                               default_pg_timeout, destroy_process_group,
                                               get_backend, get_rank, get_world_size, group,
                                               init_process_group, is_available, is_initialized,
                                               is_mpi_available)

__all__ = ["DistBackendError", "DistError", "GroupMember", "ProcessGroup", "ReduceOp", "Work",
           "all_gather_object", "all_reduce", "barrier", "broadcast", "broadcast_object_list",
           "default_pg_timeout", "destroy_process_group", "get_backend", "get_rank",
           "get_world_size", "group", "init_process_group", "is_available", "is_initialized",
           "is_mpi_available"]
