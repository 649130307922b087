#!/usr/bin/python3
"""kiln MLP/CNN checkpoints to PyTorch state_dicts and back.

    /usr/bin/python3 tools/convert_checkpoint.py to-torch CKPT OUT.pt
    /usr/bin/python3 tools/convert_checkpoint.py to-kiln IN.pt --like CKPT --out NEW_CKPT

CKPT is a checkpoint of `kiln train --save_dir` (a ckpt-<step> folder, or the
save directory: its newest). to-torch writes the parameters as the
state_dict of the PyTorch model that mirrors kiln's (the classes in
tools/bench/bench_vs_pytorch.py: `Mlp` with `hidden.<i>` and `out`, `Cnn`
with `conv0`, `conv1`, `fc0`..`fc2`); kiln's fc weights [in, out] become
Linear weights [out, in]. to-kiln writes a kiln checkpoint with the
state_dict's parameters, taking everything else (programs, optimizer state,
the loop's position) from the checkpoint given with --like; the manifest's
sha256 are recomputed and the folder appears atomically.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))


def resolve(path):
    """A checkpoint folder, or the newest ckpt-<step> in a save directory."""
    if os.path.isfile(os.path.join(path, "manifest.json")):
        return path
    steps = [(int(n[5:]), n) for n in os.listdir(path) if n.startswith("ckpt-") and n[5:].isdigit()
             and os.path.isfile(os.path.join(path, n, "manifest.json"))] if os.path.isdir(path) else []
    if not steps:
        sys.exit("convert_checkpoint: no checkpoint in '%s'" % path)
    return os.path.join(path, max(steps)[1])


def read(ckpt):
    with open(os.path.join(ckpt, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(ckpt, "model.json")) as f:
        model = json.load(f)
    arrays = {}
    for v in manifest["vars"]:
        with open(os.path.join(ckpt, v["file"]), "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != v["sha256"]:
            sys.exit("convert_checkpoint: %s is corrupt (sha256 differs from the manifest)" % v["file"])
        arrays[v["name"]] = np.load(os.path.join(ckpt, v["file"]))
    return manifest, model, arrays


def name_map(model, arrays):
    """kiln parameter name -> PyTorch state_dict key (weights, biases)."""
    kind = model["model"]
    fcs = sorted((n for n in model["params"] if n.startswith("fc") and n.endswith(".w")), key=lambda n: int(n[2:-2]))
    out = {}
    if kind == "mlp":
        for i, w in enumerate(fcs):
            prefix = "out" if i == len(fcs) - 1 else "hidden.%d" % i
            out[w], out[w[:-2] + ".b"] = prefix + ".weight", prefix + ".bias"
    elif kind == "cnn":
        for layer in ["conv0", "conv1"] + [w[:-2] for w in fcs]:
            out[layer + ".w"], out[layer + ".b"] = layer + ".weight", layer + ".bias"
    else:
        sys.exit("convert_checkpoint: model '%s' is not supported (mlp, cnn)" % kind)
    missing = [n for n in out if n not in arrays]
    if missing:
        sys.exit("convert_checkpoint: the checkpoint lacks %s" % ", ".join(missing))
    return out


def is_fc_weight(name):
    return name.startswith("fc") and name.endswith(".w")


def to_torch(args):
    import torch
    manifest, model, arrays = read(resolve(args.ckpt))
    state = {}
    for kiln_name, key in name_map(model, arrays).items():
        a = arrays[kiln_name]
        state[key] = torch.from_numpy(np.ascontiguousarray(a.T if is_fc_weight(kiln_name) else a))
    torch.save(state, args.out)
    print("convert_checkpoint: %d tensors -> %s" % (len(state), args.out))


def write_durable(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def to_kiln(args):
    import torch
    like = resolve(args.like)
    manifest, model, arrays = read(like)
    state = torch.load(args.pt, map_location="cpu")
    if os.path.exists(args.out):
        sys.exit("convert_checkpoint: '%s' exists; not overwriting it" % args.out)
    tmp = args.out + ".tmp-%d" % os.getpid()
    shutil.copytree(like, tmp)
    by_name = {v["name"]: v for v in manifest["vars"]}
    for kiln_name, key in name_map(model, arrays).items():
        if key not in state:
            shutil.rmtree(tmp)
            sys.exit("convert_checkpoint: %s has no '%s'" % (args.pt, key))
        a = state[key].detach().cpu().numpy().astype(np.float32)
        a = np.ascontiguousarray(a.T if is_fc_weight(kiln_name) else a)
        if list(a.shape) != by_name[kiln_name]["shape"]:
            shutil.rmtree(tmp)
            sys.exit("convert_checkpoint: '%s' has shape %s, kiln's '%s' needs %s"
                     % (key, list(a.shape), kiln_name, by_name[kiln_name]["shape"]))
        path = os.path.join(tmp, by_name[kiln_name]["file"])
        np.save(path, a)
        with open(path, "rb") as f:
            by_name[kiln_name]["sha256"] = hashlib.sha256(f.read()).hexdigest()
    write_durable(os.path.join(tmp, "manifest.json"), (json.dumps(manifest, indent=2) + "\n").encode())
    os.rename(tmp, args.out)
    print("convert_checkpoint: %s -> %s (the rest from %s)" % (args.pt, args.out, like))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("to-torch")
    t.add_argument("ckpt")
    t.add_argument("out")
    k = sub.add_parser("to-kiln")
    k.add_argument("pt")
    k.add_argument("--like", required=True, help="the kiln checkpoint the rest comes from")
    k.add_argument("--out", required=True, help="the checkpoint folder to write")
    args = p.parse_args()
    to_torch(args) if args.command == "to-torch" else to_kiln(args)


if __name__ == "__main__":
    main()
