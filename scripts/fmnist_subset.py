#!/usr/bin/python3
"""Writes a Fashion-MNIST folder holding the first N training and M test
images of another (idx .gz files, as Debian's dataset-fashion-mnist ships
them), for short studies: `pipedream run/train --data-dir OUT` then reads an
"epoch" of N images.

  fmnist_subset.py OUT [--train N] [--test M] [--src /usr/share/datasets/fashion-mnist]

The first N images of the training file are roughly class-balanced (the file
is shuffled), which the script prints to show.
"""
import argparse
import gzip
import os
import struct
import sys


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = data[0:2], data[2], data[3]
    if zero != b"\0\0" or dtype != 0x08:
        raise SystemExit(f"fmnist_subset.py: {path}: not an idx file of unsigned bytes")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, data[4 + 4 * ndim:]


def write_subset(src, dst, count):
    dims, body = read_idx(src)
    if count > dims[0]:
        raise SystemExit(f"fmnist_subset.py: {src} holds {dims[0]} items, fewer than {count}")
    item = len(body) // dims[0]
    new_dims = (count,) + tuple(dims[1:])
    header = b"\0\0\x08" + bytes([len(new_dims)]) + struct.pack(">" + "I" * len(new_dims), *new_dims)
    with gzip.open(dst, "wb", compresslevel=6) as f:
        f.write(header + body[:count * item])
    return body[:count * item]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--train", type=int, default=8000)
    p.add_argument("--test", type=int, default=2000)
    p.add_argument("--src", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args(argv)
    if a.train <= 0 or a.test <= 0:
        raise SystemExit("fmnist_subset.py: --train and --test must be positive")
    os.makedirs(a.out, exist_ok=True)
    for prefix, n in (("train", a.train), ("t10k", a.test)):
        for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
            src = os.path.join(a.src, f"{prefix}-{kind}.gz")
            if not os.path.isfile(src):
                raise SystemExit(f"fmnist_subset.py: {src} missing (apt-get install dataset-fashion-mnist)")
            body = write_subset(src, os.path.join(a.out, f"{prefix}-{kind}.gz"), n)
            if kind.startswith("labels"):
                counts = [body.count(bytes([c])) for c in range(10)]
                print(f"{prefix}: {n} items, per class {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
