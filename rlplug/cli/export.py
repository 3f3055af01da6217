"""``python -m rlplug export RUN_DIR --format onnx|torchscript -o FILE``: the deterministic policy of a run's
checkpoint, observation normalisation included, as a file that runs without rlplug (:mod:`rlplug.run.export`;
docs/deploy.md shows it running).

The run is rebuilt from its checkpoint as ``rlplug eval`` rebuilds it, in a scratch directory: nothing is
written into RUN_DIR.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlplug.errors import UserError

#: Modules each format needs beyond rlplug's own dependencies, and the extra that installs them.
NEEDS = {"onnx": ("onnx", "onnxscript"), "torchscript": ()}
#: Observations the ONNX file is checked on with onnxruntime after it is written.
CHECKED_OBSERVATIONS = 64


def add_commands(subparsers) -> None:
    """Adds ``export``."""
    from rlplug.cli.eval import add_best_option, add_unverified_option

    parser = subparsers.add_parser(
        "export", help="write a run's deterministic policy (normalisation included) as ONNX or TorchScript",
        description="Write the deterministic policy of a run's checkpoint, with the env's observation "
                    "normalisation frozen in, as a file that onnxruntime (onnx) or torch.jit.load (torchscript) "
                    "runs without rlplug. Input 'observation' (float32 [batch, ...]); output 'action' (the action "
                    "index for discrete actions, the action itself for continuous ones) and, for categorical "
                    "policies, 'logits'. See docs/deploy.md.")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    parser.add_argument("--format", dest="fmt", choices=("onnx", "torchscript"), default="onnx",
                        help="onnx (default; needs pip install \"rlplug[export]\") or torchscript")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="FILE", help="the file to write")
    parser.add_argument("--checkpoint", type=Path, metavar="FILE",
                        help="checkpoint to export (default: RUN_DIR/checkpoint.pt; a relative path is also looked "
                             "for inside RUN_DIR)")
    add_best_option(parser)
    add_unverified_option(parser)
    parser.set_defaults(handler=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from rlplug.cli.eval import find_checkpoint

    run_dir: Path = args.run_dir
    checkpoint = find_checkpoint(run_dir, args.checkpoint, command="export", best=args.best)
    if args.output.is_dir():
        raise UserError(f"-o {args.output}: is a directory; name the file to write")
    require(args.fmt)

    import tempfile

    from rlplug.run.export import export
    from rlplug.run.trainer import Run

    with tempfile.TemporaryDirectory(prefix="rlplug-export-") as scratch:
        run, _ = Run.from_checkpoint(checkpoint, Path(scratch) / "run", changes={"runner": {"use": "rlplug:local"}},
                                     allow_unverified=args.allow_unverified)
        try:
            path, item = export(run, args.output, args.fmt)
        finally:
            run.env.close()
            run.eval_env.close()
    info = item.info
    print(f"wrote {path} ({args.fmt}): {info['algorithm']} on {info['env']}, checkpoint {checkpoint} "
          f"(frame {info['frames']})")
    print(f"input  observation: {info['input']['observation']}")
    for name, meaning in info["outputs"].items():
        print(f"output {name}: {meaning}")
    print(f"observation normalisation: {info['observation_normalization']}")
    if args.fmt == "onnx":
        print(check_with_onnxruntime(path, item))
    return 0


def require(fmt: str) -> None:
    """One line naming the extra when a module the format needs is missing."""
    import importlib.util

    missing = [name for name in NEEDS[fmt] if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"export --format {fmt} needs {', '.join(missing)}: pip install \"rlplug[export]\"")


def check_with_onnxruntime(path: Path, item) -> str:
    """The written file run by onnxruntime against the torch module it came from, on random observations."""
    try:
        import onnxruntime
    except ImportError:
        return "not checked with onnxruntime (not installed: pip install \"rlplug[export]\")"
    import numpy as np
    import torch

    from rlplug.run.export import exporting

    rng = np.random.default_rng(0)
    observations = rng.normal(size=(CHECKED_OBSERVATIONS, *item.example.shape[1:])).astype(np.float32)
    feeds: dict[str, np.ndarray] = {"observation": observations}
    if item.mask_example is not None:  # random masks, one allowed action at least
        masks = rng.random((CHECKED_OBSERVATIONS, item.mask_example.shape[-1])) < 0.5
        masks[np.arange(CHECKED_OBSERVATIONS), rng.integers(0, masks.shape[-1], CHECKED_OBSERVATIONS)] = True
        feeds[item.inputs[1]] = masks
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(["action"], feeds)[0]
    with exporting():
        want = item.module(*(torch.from_numpy(value) for value in feeds.values()))
    want = (want[0] if isinstance(want, tuple) else want).numpy()
    if got.dtype.kind == "i":
        same = int((got == want).sum())
        return (f"checked with onnxruntime: the same action as the torch policy on {same} of {len(got)} random "
                f"observations")
    return (f"checked with onnxruntime: actions within {float(np.abs(got - want).max()):.2g} of the torch policy's "
            f"on {len(got)} random observations")
