"""One rank of a distributed training job, started by torchrun (issue 27):

    torchrun --standalone --nproc-per-node 2 bench/workloads/ddp_train.py --out DIR

A DistributedDataParallel model (gloo, CPU) trained over the multi-camera
dataset of _torchjob.py (6 x 3 x H x W float32 per sample plus numpy
metadata), loaded by DataLoader(num_workers=2, persistent_workers=True,
sampler=DistributedSampler(...)).  After each epoch the loader is idle for
--idle s while rank 0 writes a checkpoint (where stock ft keeps each worker's
last batch).  Each rank writes DIR/rank<R>.json: its per-epoch mean loss and
its workers' summed sys._brc_stats(), read by their probe threads after the
last idle phase.

Runs with torch 2.14.1 on any of the flavours; nothing here depends on
ft-brc.
"""

import argparse
import json
import os
import shutil
import tempfile
import time

import _torchjob as tj


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, help="directory for rank<R>.json")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batches", type=int, default=12,
                   help="batches per rank and epoch")
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--height", type=int, default=240)
    p.add_argument("--width", type=int, default=400)
    p.add_argument("--step-ms", type=float, default=0.0,
                   help="a training step takes at least this long (the "
                        "accelerator's share)")
    p.add_argument("--idle", type=float, default=3.0,
                   help="seconds the loader is idle after each epoch")
    p.add_argument("--context", default=None,
                   help="multiprocessing start method of the workers "
                        "(default: the DataLoader's)")
    return p.parse_args()


def main():
    args = parse()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    probe_dir = tempfile.mkdtemp(prefix="ddp-probe-%d-" % rank)
    ds = tj.Cameras(args.batches * args.batch_size * world,
                    height=args.height, width=args.width, probe_dir=probe_dir)
    sampler = DistributedSampler(ds, shuffle=True, seed=0)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.workers, persistent_workers=True,
                        worker_init_fn=tj.worker_init,
                        multiprocessing_context=args.context)
    # Predict each sample's brightness from its per-camera channel means: a
    # task small enough for two CPU cores whose loss visibly falls.
    model = DDP(torch.nn.Sequential(torch.nn.Linear(ds.cams * 3, 32),
                                    torch.nn.ReLU(), torch.nn.Linear(32, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    events = []                 # [time.monotonic(), kind, epoch]

    def ev(kind, epoch=None):
        events.append([round(time.monotonic(), 4), kind, epoch])

    ev("start")
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        ev("epoch_start", epoch)
        total = 0.0
        for n, batch in enumerate(loader):
            if n == 0:
                ev("first_batch", epoch)
            t = time.monotonic()
            x = batch["images"].mean(dim=(3, 4)).flatten(1) / 255.0
            y = x.mean(dim=1, keepdim=True)
            del batch
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
            rest = args.step_ms / 1e3 - (time.monotonic() - t)
            if rest > 0:
                time.sleep(rest)
        ev("epoch_end", epoch)
        losses.append(total / (n + 1))
        if rank == 0:
            with tempfile.TemporaryDirectory() as d:
                torch.save(model.module.state_dict(), os.path.join(d, "ckpt"))
        time.sleep(args.idle)
        dist.barrier()
        ev("pause_end", epoch)
    reports = tj.probe_workers(probe_dir, seq=1)
    result = {"rank": rank, "world_size": world,
              "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
              "node_rank": int(os.environ.get("GROUP_RANK", 0)),
              "losses": losses, "events": events, "workers": len(reports),
              "workers_brc": tj.sum_stats(reports),
              "worker_merged_on_behalf": [
                  (r["brc"] or {}).get("merged_on_behalf") for r in reports],
              "main_brc": tj.brc_stats()}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)
    del loader                  # shut the persistent workers down first
    shutil.rmtree(probe_dir, ignore_errors=True)
    dist.destroy_process_group()
    print("rank %d/%d: losses %s" % (rank, world,
          " ".join("%.4f" % v for v in losses)), flush=True)


if __name__ == "__main__":
    main()
